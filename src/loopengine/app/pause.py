"""Parking a batch and answering it: the checkpoint of a pause, and the one tool_result message.

A batch with pending items is parked (:func:`park`): its checkpoint, the pause, the audit events and
the notifications land in one write. When the batch is complete its answer, one user message with a
tool_result per tool_use in tool_use order (:func:`answer`), is appended (:func:`append_results`).
"""

from __future__ import annotations

from loopengine.app import delivery, faults
from loopengine.app.batch import pending_notification
from loopengine.app.ports import Append, Change
from loopengine.app.turn_events import pending_events
from loopengine.app.worker import TurnOutcome, Worker, load_turn, outcome_of
from loopengine.authoring.agent import AgentConfig
from loopengine.domain import turn_state as ts
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint
from loopengine.domain.errors import AlreadyExists
from loopengine.domain.messages import Message, ToolResultBlock
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus


def checkpoint_id(turn: TurnRecord, seq: int) -> str:
    """The id of the checkpoint of the batch in history message ``seq`` (one per batch)."""
    return f"cp_{turn.turn_id.removeprefix('trn_')}_{seq}"


def park(
    worker: Worker,
    config: AgentConfig,
    turn: TurnRecord,
    seq: int,
    results: list[ToolResultBlock],
    pending: list[PendingItem],
) -> TurnOutcome | None:
    """Write the checkpoint, its pointers, the pause, its audit event and notifications: one write."""
    rt = worker.rt
    cp = TurnCheckpoint(
        id=checkpoint_id(turn, seq),
        turn_id=turn.turn_id,
        session_id=turn.session_id,
        agent=turn.agent,
        tenant=turn.tenant,
        results_so_far=tuple(results),
        outstanding={p.pending_id: p for p in pending},
        created_at=rt.stores.clock.now(),
    )
    stop = (
        StopReason.PENDING_QUESTION
        if all(p.kind == "question" for p in pending)
        else StopReason.PENDING_APPROVAL
    )
    live_until = cp.created_at + config.live_wait if turn.live and config.live_wait else None
    event = rt.stamp("paused", stopReason=stop.value, pendingIds=[p.pending_id for p in pending])
    offered = tuple({**rt.stamp(name), **data} for name, data in pending_events(pending, live_until))
    notes = tuple(
        r for p in pending for r in delivery.announce(rt, config, turn, pending_notification(rt, turn, p))
    )
    notes = delivery.hold(notes, live_until)  # a live message: sent when the window closes

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        paused = ts.pause(t, worker.runner, cp.id, stop, cp.next_expiry)
        if paused is None:
            return None
        return Change(t.turn_id, turn=paused, new_checkpoint=cp, events=(event, *offered), outbox=notes)

    try:
        done = rt.transition(turn.turn_id, decide, turn=turn)
    except AlreadyExists:  # cannot happen with fresh pendingIds unless the batch was parked already
        return outcome_of(load_turn(rt, turn.turn_id))
    if done is None:  # a stop came first (nobody is asked), or the turn is no longer ours
        return None
    faults.point("paused")
    if live_until is None:
        delivery.deliver(rt, notes)
    assert done.turn is not None
    return outcome_of(done.turn, pending)


def answer(turn: TurnRecord, history: list[Message], results: list[ToolResultBlock]) -> Append:
    """The one user message answering every tool_use of the batch, in tool_use order."""
    order = {u.id: i for i, u in enumerate(history[-1].tool_uses)}
    ordered = sorted(results, key=lambda r: order.get(r.tool_use_id, len(order)))
    return Append(turn.session_id, (Message("user", tuple(ordered)),), len(history))


def append_results(
    worker: Worker,
    turn: TurnRecord,
    history: list[Message],
    results: list[ToolResultBlock],
    clear_checkpoint: bool = False,
) -> None:
    """Append the batch's answer (and, for a parked batch, drop the checkpoint pointer): one write."""
    add = answer(turn, history, results)

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        if t.status is not TurnStatus.RUNNING or t.runner != worker.runner:
            return None
        cleared = ts.clear_checkpoint(t, worker.runner) if clear_checkpoint else t
        return Change(t.turn_id, turn=cleared or t, append=add)

    if worker.rt.transition(turn.turn_id, decide, turn=turn) is not None:
        history.extend(add.messages)
        faults.point("results_appended")
