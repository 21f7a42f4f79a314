"""The hand-off: a closed batch goes to the resume worker, or finishes in the decision's own write.

A request never claims a turn. When a decision closes a batch that still holds calls to run (an
approval, an answer), the turn becomes ready in that write and the resume worker is invoked
(:func:`hand_on`; a lost or failed invoke is recorded and retried by the sweep after the hand-off
grace). When nothing is left to run (a denial with no approved sibling, a cancel, a supersede),
the same write appends the batch's one answer and finishes the turn (:func:`finish_closed`): no
worker and no ``run_start``; a denial sends no ``run_finish`` either (the reviewer's decision is the
news), a stop's ``run_finish`` rides in the write.
"""

from __future__ import annotations

from loopengine.app import faults
from loopengine.app.ports import Append, Change
from loopengine.app.runtime import Runtime
from loopengine.domain import turn_state as ts
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import TurnCheckpoint, answered_now, reply
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus


def hand_on(rt: Runtime, turn: TurnRecord) -> None:
    """Ask the resume worker to claim ``turn``; a failed invoke is recorded, the sweep retries it."""
    try:
        faults.point("invoke")
        rt.invoker.invoke(turn.turn_id, turn.code_version)
    except Exception as exc:  # the turn is durably ready: the sweep invokes it after the grace
        try:
            rt.event(turn.turn_id, "invoke_failed", error=f"{type(exc).__name__}: {exc}")
        except Exception:
            return


def finish_closed(
    rt: Runtime,
    t: TurnRecord,
    after: TurnCheckpoint,
    stop: StopReason,
    events: tuple[JsonDict, ...],
    outbox: tuple[OutboxRecord, ...] = (),
) -> Change | None:
    """The write that closes ``after`` and finishes its parked turn ``t`` for ``stop``, or ``None``.

    ``None`` when a worker is still needed: calls approved in the batch must run first, or the
    checkpoint does not say where its answer goes. ``outbox``: notifications that ride in the write.
    """
    if not answered_now(after) or t.status is not TurnStatus.PAUSED or t.checkpoint_id != after.id:
        return None
    done = ts.finish(t, None, stop, None)
    if done is None:
        return None
    add = Append(t.session_key, (reply(after),), after.answer_at)
    finished = rt.stamp("finished", stopReason=stop.value, text=None)
    return Change(
        t.turn_id, turn=done, checkpoint=after, append=add, events=(*events, finished), outbox=outbox
    )


def start_next_queued(rt: Runtime, session_key: str) -> None:
    """The session is free: the next queued message starts its turn (the sweep retries if lost)."""
    unfinished = rt.stores.turns.unfinished_session_turns(session_key)
    waiting = [t for t in unfinished if t.status is TurnStatus.QUEUED]
    if waiting:
        hand_on(rt, waiting[0])
