"""Outgoing notifications as durable records: written with the state they announce, sent after.

A pause writes its ``approval`` / ``question`` notifications in the same transaction as the pause
(a start its ``run_start``, a finish its ``run_finish``). The writer tries to deliver them right
after the write; whatever is not delivered stays *due* and the sweep retries it with backoff
until it is delivered or given up (both recorded). Delivery is therefore at least once: every
payload carries a stable ``eventId`` so a receiver can drop the duplicates.

    pending --send ok--> delivered
    pending --send failed--> pending (attempts + 1, due later) ... --> failed (gave up)
    pending (held) --its item was decided in the live window--> dropped

**One record per (notification, target).** An agent may send each notification to several targets
(agent.yaml's ``notifiers:``); each gets its own record, naming the target by its key in the turn's
pinned config (``t0``, ``t1``, ...), so each target is tried, retried, given up or dropped on its
own: a failing Slack never re-sends the webhook. The ``eventId`` is the notification's, the same
in every target's record and body (it names the event, not the delivery; a receiver fed by two
targets can drop the second copy too); :attr:`OutboxRecord.key` (``eventId#target``) tells the
records apart in the stores. A record written before targets existed has no ``target``: it is
``t0``'s, under the key ``eventId`` it was stored with.

A live message (``"live": true``) writes a pause's notifications due at the end of the agent's
``live_wait`` instead: the writer leaves them to the sweep, which drops those whose item was
decided inline meanwhile (only held records are dropped: any other stays at least once).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.base.stored import Stored, StoredForm

FIRST_RETRY_SECONDS = 30.0
"""The writer tries at once; the sweep leaves a record alone this long (the writer's attempt)."""
MAX_BACKOFF_SECONDS = 3600.0
MAX_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class OutboxRecord(StoredForm):
    """One notification to deliver to one target (``due_at`` None once delivered, dropped or given up).

    ``target``: the target's key in the config ``config_hash`` (``None``: a record from before
    targets, meaning ``t0``). ``held``: written due at the end of a live window (not sent by the
    writer); the sweep drops it if its item was decided meanwhile.
    """

    event_id: str
    turn_id: str
    agent: str
    config_hash: str
    event: str
    payload: JsonDict
    created_at: float
    attempts: int = 0
    state: str = "pending"
    due_at: float | None = None
    last_error: str | None = None
    held: bool = False
    target: str | None = None

    @property
    def key(self) -> str:
        """The record's id in the stores: ``eventId#target`` (just ``eventId`` for a record without one)."""
        return self.event_id if self.target is None else f"{self.event_id}#{self.target}"


OutboxRecord.stored = Stored(OutboxRecord, always=("attempts", "state", "due_at", "last_error"))


def new_record(
    event_id: str,
    turn_id: str,
    agent: str,
    config_hash: str,
    event: str,
    payload: JsonDict,
    now: float,
    target: str | None = None,
) -> OutboxRecord:
    """A pending notification for ``target``; its payload carries ``eventId``."""
    body = {"eventId": event_id, **payload}
    return OutboxRecord(
        event_id,
        turn_id,
        agent,
        config_hash,
        event,
        body,
        now,
        due_at=now + FIRST_RETRY_SECONDS,
        target=target,
    )


def delivered(record: OutboxRecord) -> OutboxRecord:
    """The receiver took it."""
    return replace(record, attempts=record.attempts + 1, state="delivered", due_at=None, last_error=None)


def dropped(record: OutboxRecord) -> OutboxRecord:
    """Not sent: the item it announces was decided before it went out."""
    return replace(record, state="dropped", due_at=None, last_error=None)


def attempt_failed(record: OutboxRecord, now: float, error: str) -> OutboxRecord:
    """One more failed attempt: due again after an exponential backoff, or given up."""
    attempts = record.attempts + 1
    if attempts >= MAX_ATTEMPTS:
        return replace(record, attempts=attempts, state="failed", due_at=None, last_error=error)
    delay = min(MAX_BACKOFF_SECONDS, FIRST_RETRY_SECONDS * 2 ** (attempts - 1))
    return replace(record, attempts=attempts, due_at=now + delay, last_error=error)
