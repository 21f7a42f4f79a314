"""TurnCheckpoint: a paused batch, and its transitions (pure functions, no I/O).

Shape (seed 000 "Worked example"): ``resultsSoFar`` holds the results of calls that already ran
(or were answered, denied, skipped, expired); ``outstanding`` maps each pendingId to what it waits
for. One more map, ``approved``, holds items a human approved, with the arguments that will run:
a resolve only *records* the decision; the worker that resumes the turn runs them (each claimed
before it runs, so a crash reports ``unknown``, never a second run).

    outstanding --approve--> approved ........ (worker runs it after the batch closes)
    outstanding --answer---> resultsSoFar
    outstanding --expire---> resultsSoFar (unknown, or denied by policy)
    outstanding --deny-----> resultsSoFar (denied); every other item still outstanding is
                             skipped; items already approved stay approved and still run
    outstanding --abandon--> resultsSoFar (unknown: superseded, cancelled)

``closed`` means nothing is left to decide. Exactly one compare-and-set closes it, and the same
write makes the turn ready to resume (:func:`loopengine.domain.turn_state.ready`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Literal, TypedDict

from loopengine.domain import outcomes
from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.base.stored import Stored, StoredForm
from loopengine.domain.decisions import (
    Abandoned,
    Answer,
    Approve,
    DecidedBy,
    Decision,
    Deny,
    Expired,
    Skipped,
    decision_from_dict,
)
from loopengine.domain.messages import Message, ToolResultBlock, block_from_dict

Kind = Literal["approval", "question"]


@dataclass(frozen=True, slots=True)
class PendingItem(StoredForm):
    """One call waiting for a human."""

    pending_id: str
    tool_use_id: str
    tool: str
    args: JsonDict
    reason: str
    kind: Kind
    args_hash: str
    approvers: tuple[str, ...] = ()
    expires_at: float | None = None
    on_expiry: str = "unknown"


PendingItem.stored = Stored(
    PendingItem, first=("expires_at", "on_expiry"), fallback={"kind": "approval", "args_hash": ""}
)
"""No expiry and no approvers are left out of the stored form."""


@dataclass(frozen=True, slots=True)
class TurnCheckpoint(StoredForm):
    """A paused batch; see the module docstring."""

    id: str
    turn_id: str
    session_id: str
    agent: str
    tenant: str
    results_so_far: tuple[ToolResultBlock, ...]
    outstanding: dict[str, PendingItem]
    created_at: float
    approved: dict[str, PendingItem] = field(default_factory=dict)
    closed: bool = False
    denied: bool = False
    decisions: tuple[Decision, ...] = ()
    version: int = 0
    answer_at: int = -1
    """The history index the batch's one answer goes to (-1: not recorded)."""
    order: tuple[str, ...] = ()
    """The batch's tool_use ids in the model's order (its answer keeps that order)."""

    @property
    def complete(self) -> bool:
        """Nothing left to decide (the worker may run the approved calls)."""
        return self.closed

    @property
    def next_expiry(self) -> float | None:
        """When the first still-open item expires (``None``: no open item has a ttl)."""
        times = [i.expires_at for i in self.outstanding.values() if i.expires_at is not None]
        return min(times) if times and not self.closed else None

    @property
    def pending_ids(self) -> list[str]:
        """Every pendingId this checkpoint ever handed out."""
        return [d.pending_id for d in self.decisions] + list(self.outstanding)


def _items(items: dict[str, PendingItem]) -> JsonDict:
    return {k: v.to_dict() for k, v in items.items()}


def _items_of(stored: JsonDict) -> dict[str, PendingItem]:
    return {k: PendingItem.from_dict(v) for k, v in stored.items()}


def _results_of(stored: list[JsonDict]) -> tuple[ToolResultBlock, ...]:
    blocks = tuple(block_from_dict(raw) for raw in stored)
    assert all(isinstance(b, ToolResultBlock) for b in blocks)
    return blocks  # type: ignore[return-value]


TurnCheckpoint.stored = Stored(
    TurnCheckpoint,
    always=("version",),
    last=("created_at", "version", "answer_at", "order"),
    convert={
        "results_so_far": (lambda blocks: [b.to_dict() for b in blocks], _results_of),
        "outstanding": (_items, _items_of),
        "approved": (_items, _items_of),
        "decisions": (lambda ds: [d.to_dict() for d in ds], lambda ds: tuple(map(decision_from_dict, ds))),
    },
    fallback={"tenant": "", "results_so_far": ()},
)


def reply(cp: TurnCheckpoint) -> Message:
    """The one user message answering the closed batch: every result, in the batch's tool_use order."""
    rank = {use_id: i for i, use_id in enumerate(cp.order)}
    ordered = sorted(cp.results_so_far, key=lambda r: rank.get(r.tool_use_id, len(rank)))
    return Message("user", tuple(ordered))


def answered_now(cp: TurnCheckpoint) -> bool:
    """Closed with nothing approved left to run: the batch's whole answer is known without a worker."""
    return cp.closed and not cp.approved and cp.answer_at >= 0


def decisions_for(cp: TurnCheckpoint, pending_id: str) -> list[Decision]:
    """What was decided about one item, oldest first (empty while it is open)."""
    return [d for d in cp.decisions if d.pending_id == pending_id]


class _Who(TypedDict):
    pending_id: str
    tool: str
    at: float
    decided_by: str
    channel: str | None


def _who(item: PendingItem, by: DecidedBy, at: float) -> _Who:
    return {
        "pending_id": item.pending_id,
        "tool": item.tool,
        "at": at,
        "decided_by": by.identity,
        "channel": by.channel,
    }


def approve(
    cp: TurnCheckpoint,
    item: PendingItem,
    args: JsonDict,
    by: DecidedBy,
    at: float,
    edited: bool,
    comment: str | None = None,
) -> TurnCheckpoint:
    """Approve ``item``: it moves to ``approved`` with the args that will actually run."""
    outstanding = {k: v for k, v in cp.outstanding.items() if k != item.pending_id}
    decision = Approve(**_who(item, by, at), edited_args=args if edited else None, comment=comment)
    return replace(
        cp,
        outstanding=outstanding,
        approved={**cp.approved, item.pending_id: replace(item, args=args)},
        closed=not outstanding,
        decisions=(*cp.decisions, decision),
    )


def choices(item: PendingItem) -> list[str]:
    """A question's options (the strings among what the model offered)."""
    options = item.args.get("options")
    return [o for o in options if isinstance(o, str)] if isinstance(options, list) else []


def takes_free_text(item: PendingItem) -> bool:
    """Whether a question may be answered in words: it has no options, or allows it (``allow_free_text``)."""
    return not choices(item) or item.args.get("allow_free_text") is True


def check_answer(item: PendingItem, text: str) -> None:
    """A question with options takes one of them, unless it allows free text (``allow_free_text``).

    Raises :class:`~loopengine.domain.base.errors.InvalidInput` naming the options (400 on every channel);
    surrounding whitespace is ignored, case is not.
    """
    if takes_free_text(item) or text.strip() in {o.strip() for o in choices(item)}:
        return
    named = ", ".join(json.dumps(o, ensure_ascii=False) for o in choices(item))
    raise InvalidInput(f"this question takes one of its options: {named}")


def answer(cp: TurnCheckpoint, item: PendingItem, text: str, by: DecidedBy, at: float) -> TurnCheckpoint:
    """Record the user's answer to a question (:func:`check_answer` first)."""
    outstanding = {k: v for k, v in cp.outstanding.items() if k != item.pending_id}
    return replace(
        cp,
        outstanding=outstanding,
        results_so_far=(*cp.results_so_far, outcomes.answered(item.tool_use_id, text)),
        closed=not outstanding,
        decisions=(*cp.decisions, Answer(**_who(item, by, at), answer=text)),
    )


def deny(
    cp: TurnCheckpoint, item: PendingItem, comment: str | None, by: DecidedBy, at: float
) -> TurnCheckpoint:
    """Deny ``item``: close at once; the items still outstanding are skipped (seed 000).

    Items already approved stay approved: their approvers were told so, and the worker runs them
    (once) before the turn stops ``denied``, so the batch's answer holds their real results.
    """
    results = [outcomes.denied(item.tool_use_id, "a human reviewer denied this call", comment)]
    decisions: list[Decision] = [Deny(**_who(item, by, at), comment=comment)]
    for other in cp.outstanding.values():
        if other.pending_id == item.pending_id:
            continue
        results.append(outcomes.skipped(other.tool_use_id))
        decisions.append(Skipped(pending_id=other.pending_id, tool=other.tool, at=at))
    return replace(
        cp,
        outstanding={},
        results_so_far=(*cp.results_so_far, *results),
        closed=True,
        denied=True,
        decisions=(*cp.decisions, *decisions),
    )


def expire(
    cp: TurnCheckpoint, item: PendingItem, at: float, waited: str, by: DecidedBy | None = None
) -> TurnCheckpoint:
    """Nobody answered ``item`` in time: record the policy's outcome (never "failed").

    ``by``: an operator who closed it before its deadline (else the policy closed it).
    """
    outstanding = {k: v for k, v in cp.outstanding.items() if k != item.pending_id}
    why = f"nobody answered within {waited}"
    if item.on_expiry == "deny":
        result = outcomes.denied(item.tool_use_id, f"{why}; the agent's policy treats that as a denial")
    else:
        result = outcomes.unknown(item.tool_use_id, f"{why}; the call did not run")
    decision = Expired(pending_id=item.pending_id, tool=item.tool, at=at, on_expiry=item.on_expiry)
    if by is not None:
        decision = replace(decision, decided_by=by.identity, channel=by.channel)
    return replace(
        cp,
        outstanding=outstanding,
        results_so_far=(*cp.results_so_far, result),
        closed=not outstanding,
        decisions=(*cp.decisions, decision),
    )


def abandon(cp: TurnCheckpoint, why: str, by: DecidedBy, at: float) -> TurnCheckpoint:
    """Close without a decision (superseded, cancelled): every item not yet run becomes ``unknown``.

    That includes approved items: the worker runs them only once the batch closes, so none has run.
    """
    items = [*cp.outstanding.values(), *cp.approved.values()]
    results = [outcomes.unknown(i.tool_use_id, why) for i in items]
    decisions = [Abandoned(**_who(i, by, at), why=why) for i in items]
    return replace(
        cp,
        outstanding={},
        approved={},
        results_so_far=(*cp.results_so_far, *results),
        closed=True,
        decisions=(*cp.decisions, *decisions),
    )
