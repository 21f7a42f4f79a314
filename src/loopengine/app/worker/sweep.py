"""The sweep: the periodic pass that finds every stalled turn and moves it on.

See :mod:`loopengine.domain.turn_state` for what makes a turn due; a turn handed on twice still runs
once (the worker's claim is a compare-and-set).
"""

from __future__ import annotations

from dataclasses import dataclass

from loopengine.app import delivery
from loopengine.app.request import expiry
from loopengine.app.request.handoff import hand_on
from loopengine.app.runtime import Runtime
from loopengine.app.worker.resume import session_free
from loopengine.domain import turn_state as ts
from loopengine.domain.turns import TurnRecord, TurnStatus


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one sweep did: items expired, turns handed on, notifications (re)sent, turns that failed.

    ``oldest_due``: how many seconds the earliest due turn it found had been due (0 when none was):
    a turn that stays due sweep after sweep is stuck (the ``OldestDueSeconds`` metric).
    """

    expired: int = 0
    recovered: int = 0
    notified: int = 0
    failed: int = 0
    oldest_due: float = 0.0


NOTIFY_BATCH = 100
"""Due notifications one pass sends at most (the rest stay due for the next pass)."""


def sweep(rt: Runtime, limit: int | None = None) -> SweepResult:
    """The periodic pass that finds every stalled turn (see :mod:`loopengine.domain.turn_state`).

    Due turns: a PAUSED one has items past their ttl (expired by policy); a RUNNING one lost its
    runner (its lease ran out), a READY one was never claimed (the invoke failed or was lost), a
    RETRYING one's retry time came, a QUEUED one may start: each is handed to the resume worker,
    whose claim is a compare-and-set, so a turn handed on twice still runs once. At most ``limit``
    (default ``rt.sweep_batch``) due turns, the earliest due first, are moved on in one pass; the rest
    stay due and the next pass takes them (a READY turn handed on is due again only after the grace,
    so the turns behind it are reached even if its resume keeps failing). Then every notification
    that is due is sent again.
    """
    now = rt.stores.clock.now()
    expired = recovered = failed = 0
    due = rt.stores.turns.due_turns(now, limit or rt.sweep_batch)
    oldest = max((now - t.due_at for t in due if t.due_at is not None), default=0.0)
    for turn in due:
        try:
            moved = _sweep_one(rt, turn, now)
        except Exception as exc:  # one bad turn must not stop the pass; it stays due
            failed += 1
            _note_failure(rt, turn.turn_id, exc)
            continue
        expired += moved if turn.status is TurnStatus.PAUSED else 0
        recovered += moved if turn.status is not TurnStatus.PAUSED else 0
    notified = delivery.deliver_due(rt, NOTIFY_BATCH)
    return SweepResult(expired, recovered, notified, failed, oldest)


def _sweep_one(rt: Runtime, turn: TurnRecord, now: float) -> int:
    """Move one due turn on; returns how many items expired (PAUSED) or 1 if it was handed on."""
    if turn.status is TurnStatus.PAUSED:
        return expiry.expire_due(rt, turn)
    if ts.look_later(turn, now) is not None:  # its runner renewed the lease: not due, nothing to do
        rt.update_turn(turn.turn_id, lambda t: ts.look_later(t, now), turn)  # look at the lease end
        return 0
    if turn.status is TurnStatus.QUEUED:
        if session_free(rt, turn):
            hand_on(rt, turn)
            return 1
        # not yet: out of this page, so the turns behind it are reached
        rt.update_turn(turn.turn_id, lambda t: ts.wait_queued(t, now + rt.handoff_grace), turn)
        return 0
    if turn.status in ts.CLAIMABLE:
        _handing_on(rt, turn, now)
        hand_on(rt, turn)
        return 1
    return 0


def _handing_on(rt: Runtime, turn: TurnRecord, now: float) -> None:
    """Record the hand-on; a READY or lapsed RUNNING turn is looked at again after the grace.

    One write either way (the event, with the due time's move when there is one), so a turn whose
    resume keeps failing goes behind the turns due after it and a bounded pass reaches them.
    """
    event = rt.stamp("sweep_handed_on", status=turn.status.value)
    later = rt.update_turn(turn.turn_id, lambda t: ts.handed_on(t, now, rt.handoff_grace), turn, event)
    if later is None:  # (the transition told the observer of its events; here the event alone)
        rt.event(turn.turn_id, "sweep_handed_on", for_agent=turn.agent, status=turn.status.value)


def _note_failure(rt: Runtime, turn_id: str, exc: Exception) -> None:
    try:
        rt.event(turn_id, "sweep_failed", error=f"{type(exc).__name__}: {exc}")
    except Exception:
        return
