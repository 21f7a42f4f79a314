"""What became of a pending item: the one answer every channel gives to a late click.

A magic-link page, a Slack or Lark button, the inbox and the API all ask the same question about an
item they cannot decide any more, and :func:`item_fate` is the only place that answers it, from the
checkpoint's decision log and, for items closed without a decision, the turn's stop reason::

    no checkpoint ............................ GONE        (resolved long ago, or never existed)
    outstanding, before its deadline ......... OPEN
    outstanding, past its deadline ........... EXPIRED     (the sweep has not recorded it yet)
    approve / deny / answer .................. APPROVED / DENIED / ANSWERED, with who and when
    skipped .................................. SKIPPED     (a sibling was denied)
    expired .................................. EXPIRED     (``denied_by_policy`` when on_expiry is deny)
    abandoned + turn superseded / cancelled .. SUPERSEDED / CANCELLED
    abandoned, otherwise ..................... ABANDONED

Channels word it their own way (a page, a Slack message); what they word is this.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from loopengine.domain.checkpoint import TurnCheckpoint, decisions_for
from loopengine.domain.decisions import Abandoned, Answer, Approve, Decision, Deny, Expired, Skipped
from loopengine.domain.turns import StopReason


class FateState(StrEnum):
    """What became of an item."""

    OPEN = "open"
    GONE = "gone"
    APPROVED = "approved"
    DENIED = "denied"
    ANSWERED = "answered"
    SKIPPED = "skipped"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"


@dataclass(frozen=True, slots=True)
class Fate:
    """An item's fate and the record behind it (``None`` while open, gone or expired unrecorded)."""

    state: FateState
    decision: Decision | None = None

    @property
    def open(self) -> bool:
        """Still waiting for a decision."""
        return self.state is FateState.OPEN

    @property
    def denied_by_policy(self) -> bool:
        """Expired under an ``on_expiry: deny`` policy."""
        return isinstance(self.decision, Expired) and self.decision.on_expiry == "deny"

    @property
    def by_a_person(self) -> bool:
        """Decided by someone (approve, deny, answer): ``decision`` names them."""
        return isinstance(self.decision, Approve | Deny | Answer)


_BY_KIND: dict[type, FateState] = {
    Approve: FateState.APPROVED,
    Deny: FateState.DENIED,
    Answer: FateState.ANSWERED,
    Skipped: FateState.SKIPPED,
    Expired: FateState.EXPIRED,
}


def item_fate(cp: TurnCheckpoint | None, stop: StopReason | None, pending_id: str, now: float) -> Fate:
    """The fate of ``pending_id`` (see the module docstring); ``stop`` is the turn's stop reason."""
    if cp is None:
        return Fate(FateState.GONE)
    item = None if cp.closed else cp.outstanding.get(pending_id)
    if item is not None:
        due = item.expires_at is not None and item.expires_at <= now
        return Fate(FateState.EXPIRED if due else FateState.OPEN)
    mine = decisions_for(cp, pending_id)
    if not mine:
        return Fate(FateState.GONE)
    last = mine[-1]
    if isinstance(last, Abandoned):
        if stop is StopReason.SUPERSEDED:
            return Fate(FateState.SUPERSEDED, last)
        if stop is StopReason.CANCELLED:
            return Fate(FateState.CANCELLED, last)
        return Fate(FateState.ABANDONED, last)
    return Fate(_BY_KIND[type(last)], last)
