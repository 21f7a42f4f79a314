"""Stopping a turn (cancelled, superseded): "do nothing further", never "unsay".

A parked turn's open items are abandoned (recorded as ``unknown``, never as denied or failed) in
the write that stops it; a running turn stops at its next step boundary; a queued one never starts.
"""

from __future__ import annotations

from loopengine.app import delivery
from loopengine.app.outcome import load_turn
from loopengine.app.ports import Change
from loopengine.app.request.handoff import finish_closed, start_next_queued
from loopengine.app.runtime import Runtime
from loopengine.domain import checkpoint as cps
from loopengine.domain import notifications
from loopengine.domain import turn_state as ts
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.decisions import DecidedBy
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus

ABANDONED = {
    StopReason.SUPERSEDED: (
        "the user moved on with a new message before anyone answered; "
        "this call was neither approved nor denied and did not run"
    ),
    StopReason.CANCELLED: "the turn was cancelled before anyone answered; this call did not run",
}


def request_stop(rt: Runtime, turn_id: str, reason: StopReason, by: DecidedBy) -> TurnRecord:
    """Stop a turn for ``reason`` (cancelled or superseded) as soon as it safely can; the turn after.

    Parked: its open items are abandoned (recorded as ``unknown``, never as denied or failed) and
    the turn finishes, with the batch's answer, in that one write (nothing runs). Running: it stops
    at the next step boundary (between model and tool calls); calls already running finish, nothing
    new starts. Queued: it never starts. Finished: nothing changes. What was done is not undone.
    A turn left ready with a stop requested (:func:`needs_closing`) is closed by a worker.
    """
    turn = load_turn(rt, turn_id)
    now = rt.stores.clock.now()
    why = ABANDONED.get(reason, ABANDONED[StopReason.CANCELLED])
    event = rt.stamp("stop_requested", reason=reason.value, **by.fields())
    notes = delivery.announce(
        rt, rt.config_of(turn), turn, notifications.run_finish(turn, reason.value, None)
    )

    sent: list[OutboxRecord] = []

    def decide(t: TurnRecord, cp: TurnCheckpoint | None) -> Change | None:
        sent.clear()
        if t.status is TurnStatus.PAUSED and cp is not None and not cp.closed and t.checkpoint_id == cp.id:
            closed = cps.abandon(cp, why, by, now)
            finishing = finish_closed(rt, t, closed, reason, (event,), notes)
            if finishing is not None:
                sent.extend(notes)
                return finishing
            stopped = ts.stop_parked(t, reason, now, rt.handoff_grace)
            return (
                None if stopped is None else Change(turn_id, turn=stopped, checkpoint=closed, events=(event,))
            )
        flagged = ts.request_stop(t, reason, now)
        return None if flagged is None else Change(turn_id, turn=flagged, events=(event,))

    done = rt.transition(turn_id, decide, turn=turn, checkpoint=turn.checkpoint_id)
    after = done.turn if done is not None and done.turn is not None else load_turn(rt, turn_id)
    if done is not None and sent:
        delivery.deliver(rt, sent)
    if after.status is TurnStatus.FINISHED and after.queued_behind:
        start_next_queued(rt, after.session_key)
    return after


def needs_closing(rt: Runtime, turn: TurnRecord) -> bool:
    """A stop was requested of a turn no worker holds, with no approved call waiting to run."""
    stopping = turn.status in (TurnStatus.READY, TurnStatus.RETRYING) and turn.stop_requested is not None
    return stopping and not _approved_calls_waiting(rt, turn)


def _approved_calls_waiting(rt: Runtime, turn: TurnRecord) -> bool:
    if turn.checkpoint_id is None:
        return False
    cp = rt.stores.checkpoints.get(turn.checkpoint_id)
    return cp is not None and bool(cp.approved)
