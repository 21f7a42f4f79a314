"""Parking a batch and answering it: the checkpoint of a pause, and the one tool_result message.

A batch with pending items is parked (:func:`park`): its checkpoint, the pause, the audit events and
the notifications land in one write. When the batch is complete its answer, one user message with a
tool_result per tool_use in tool_use order (:func:`answer`), is appended (:func:`append_results`).
"""

from __future__ import annotations

from loopengine.app import delivery, faults
from loopengine.app.outcome import TurnOutcome, load_turn, outcome_of
from loopengine.app.ports import Append, Change
from loopengine.app.turn_events import pending_events
from loopengine.app.worker.batch import pending_notification
from loopengine.app.worker.runner import NOTHING, Carry, Worker
from loopengine.authoring.agent import AgentConfig
from loopengine.domain import turn_state as ts
from loopengine.domain.base.errors import AlreadyExists
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint
from loopengine.domain.messages import Message, ToolResultBlock
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus


def checkpoint_id(turn: TurnRecord, seq: int) -> str:
    """The id of the checkpoint of the batch in history message ``seq`` (one per batch)."""
    return f"cp_{turn.turn_id.removeprefix('trn_')}_{seq}"


def park(
    worker: Worker,
    config: AgentConfig,
    turn: TurnRecord,
    history: list[Message],
    results: list[ToolResultBlock],
    pending: list[PendingItem],
    carry: Carry = NOTHING,
) -> TurnOutcome | None:
    """Write the checkpoint, its pointers, the pause, its audit event and notifications: one write.

    What ``carry`` holds (the model's response, verdicts, outcomes of calls run) lands in the same
    write. ``None``: the pause did not land because a stop came first (nobody is asked); the caller
    closes the batch. The batch is the message ``carry`` brings, else the last of ``history``.
    """
    rt = worker.rt
    seq = len(history) if carry.message is not None else len(history) - 1
    batch = carry.message if carry.message is not None else history[-1]
    cp = _checkpoint(turn, seq, batch, results, pending, rt.stores.clock.now())
    asks = all(p.kind == "question" for p in pending)
    stop = StopReason.PENDING_QUESTION if asks else StopReason.PENDING_APPROVAL
    live_until = cp.created_at + config.live_wait if turn.live and config.live_wait else None
    event = rt.stamp("paused", stopReason=stop.value, pendingIds=[p.pending_id for p in pending])
    offered = tuple({**rt.stamp(name), **data} for name, data in pending_events(pending, live_until))
    notes = tuple(
        r for p in pending for r in delivery.announce(rt, config, turn, pending_notification(rt, turn, p))
    )
    notes = delivery.hold(notes, live_until)  # a live message: sent when the window closes
    add = None if carry.message is None else Append(turn.session_key, (carry.message,), len(history))

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        answered = carry.onto(t, worker.runner, worker.lease_until())
        paused = None if answered is None else ts.pause(answered, worker.runner, cp.id, stop, cp.next_expiry)
        if paused is None:
            return None
        events = (*carry.all_events(), event, *offered)
        return Change(
            t.turn_id,
            turn=paused,
            new_checkpoint=cp,
            append=add,
            events=events,
            outbox=notes,
            calls=carry.calls(),
        )

    try:
        done = carry.commit(rt, turn.turn_id, decide, turn)
    except AlreadyExists:  # cannot happen with fresh pendingIds unless the batch was parked already
        return outcome_of(load_turn(rt, turn.turn_id))
    if done is None:  # a stop came first (nobody is asked), or the turn is no longer ours
        return None
    if add is not None:
        history.extend(add.messages)
    carry.landed()
    faults.point("paused")
    if live_until is None:
        delivery.deliver(rt, notes)
    assert done.turn is not None
    return outcome_of(done.turn, pending)


def _checkpoint(
    turn: TurnRecord,
    seq: int,
    batch: Message,
    results: list[ToolResultBlock],
    pending: list[PendingItem],
    now: float,
) -> TurnCheckpoint:
    """The checkpoint of the batch in history message ``seq`` (its one answer goes right after it)."""
    return TurnCheckpoint(
        id=checkpoint_id(turn, seq),
        turn_id=turn.turn_id,
        session_id=turn.session_id,
        agent=turn.agent,
        tenant=turn.tenant,
        results_so_far=tuple(results),
        outstanding={p.pending_id: p for p in pending},
        created_at=now,
        answer_at=seq + 1,
        order=tuple(u.id for u in batch.tool_uses),
    )


def answer(
    turn: TurnRecord, history: list[Message], results: list[ToolResultBlock], carry: Carry = NOTHING
) -> Append:
    """The one user message answering every tool_use of the batch, in tool_use order.

    When ``carry`` brings the model's message (not stored yet), it is appended first, in the same write.
    """
    batch = carry.message if carry.message is not None else history[-1]
    order = {u.id: i for i, u in enumerate(batch.tool_uses)}
    ordered = sorted(results, key=lambda r: order.get(r.tool_use_id, len(order)))
    reply = Message("user", tuple(ordered))
    messages = (reply,) if carry.message is None else (carry.message, reply)
    return Append(turn.session_key, messages, len(history))


def append_results(
    worker: Worker,
    turn: TurnRecord,
    history: list[Message],
    results: list[ToolResultBlock],
    clear_checkpoint: bool = False,
    carry: Carry = NOTHING,
) -> TurnRecord | None:
    """Append the batch's answer (and, for a parked batch, drop the checkpoint pointer): one write.

    The outcomes of the calls ``carry`` ran land in it. Returns the turn as stored (None: the turn is
    no longer this runner's).
    """
    add = answer(turn, history, results, carry)

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        held = carry.onto(t, worker.runner, worker.lease_until())
        if held is None or held.status is not TurnStatus.RUNNING or held.runner != worker.runner:
            return None
        cleared = ts.clear_checkpoint(held, worker.runner) if clear_checkpoint else held
        return Change(
            t.turn_id, turn=cleared or held, append=add, events=carry.all_events(), calls=carry.calls()
        )

    done = carry.commit(worker.rt, turn.turn_id, decide, turn)
    if done is None:
        return None
    history.extend(add.messages)
    carry.landed()
    faults.point("results_appended")
    return done.turn
