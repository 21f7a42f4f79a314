"""Resuming: the worker claims a turn that can move on and advances it; a queued message starts.

Every claim is a compare-and-set of :func:`loopengine.domain.turn_state.claim`, written with its
events and notifications in one atomic write (:meth:`Runtime.transition`), so a duplicate delivery
finds nothing to do.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

from loopengine.app import delivery, faults
from loopengine.app.outcome import TurnOutcome, load_turn
from loopengine.app.ports import Append, Change, Committed
from loopengine.app.runtime import Decide, Runtime
from loopengine.app.worker.claims import first_claim, landed_claim
from loopengine.app.worker.loop import advance
from loopengine.app.worker.runner import Worker
from loopengine.domain import notifications
from loopengine.domain import turn_state as ts
from loopengine.domain.base.errors import AlreadyExists, StoreError, VersionConflict
from loopengine.domain.base.ids import new_id
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.messages import Message, ToolUseBlock
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.turns import CallRecord, TurnRecord, TurnStatus


def resume_turn(
    rt: Runtime, turn_id: str, budget_seconds: float | None = None, remaining_seconds: float | None = None
) -> TurnOutcome | None:
    """Claim and advance a turn that can move on; ``None`` when there is nothing to do.

    Safe to call any number of times for the same turn (at-least-once delivery): the claim is a
    compare-and-set of :func:`loopengine.domain.turn_state.claim`, which only a READY turn, a RETRYING one
    that is due, a RUNNING one whose lease ran out or a QUEUED one whose session is free passes.
    """
    turn = load_turn(rt, turn_id)
    if turn.status not in ts.CLAIMABLE:
        return None
    runner = new_id("run_")
    worker = Worker.within(rt, turn_id, runner, budget_seconds, remaining_seconds)
    if turn.status is TurnStatus.QUEUED:
        return _start_queued(rt, worker, turn)
    now = rt.stores.clock.now()
    worker.closing = _closed_batch(rt, turn)  # (with the turn's config, when this process lacks it)
    notes = _run_start(rt, turn, "resume")
    sent: list[tuple[Any, ...]] = []
    claims = _approved_claim(worker, turn, worker.closing, now)
    # the claim is the last store operation before the call's body: what the body's step reads is
    # read first, so no read can fail between the claim and the run and leave the call `unknown`
    history = rt.stores.sessions.load_since_compaction(turn.session_key) if claims else None

    written: list[tuple[CallRecord, ...]] = [()]  # the calls claimed in the last write decided

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        sent.clear()
        written[0] = ()
        claimed = ts.claim(t, runner, now, worker.lease_until())
        if claimed is None:
            return None
        if claimed.stop_requested is not None:
            return Change(turn_id, turn=claimed)  # a stopping turn only closes; nothing is announced
        sent.append(notes)
        events = (rt.stamp("resumed", claimedFrom=t.status.value),)
        fresh = claims if t.status is TurnStatus.READY and t.checkpoint_id == turn.checkpoint_id else ()
        written[0] = fresh
        return Change(turn_id, turn=claimed, events=events, outbox=notes, claims=fresh)

    try:
        done = _claim(rt, turn_id, decide, turn, runner)
    except AlreadyExists:  # a call was claimed before (a runner died, or handed off mid-batch)
        claims = ()  # claim the turn alone; those calls answer from their records
        done = _claim(rt, turn_id, decide, turn, runner)
    if done is None:
        return None  # someone else claimed it, or it is not claimable yet
    if done.turn is not None and done.turn.stop_requested is None:
        worker.claimed = {c.tool_use_id: c for c in written[0]}
    faults.point("claimed")
    if not worker.claimed:
        history = None
    for records in sent:  # a store error here must not strand a claimed call: its record stays due
        with contextlib.suppress(StoreError):  # (stored with the claim) and the sweep sends it
            delivery.deliver(rt, records)
    return advance(worker, done.turn, history)


def _claim(rt: Runtime, turn_id: str, decide: Decide, turn: TurnRecord, runner: str) -> Committed | None:
    """``rt.transition``; a write that raised but landed (its answer lost every time) is ours all the same.

    The claims that rode in it are then this worker's to run (:func:`landed_claim`), so a call the
    worker never started is not left claimed, and ``unknown`` for good, by a lost answer.
    """
    try:
        return rt.transition(turn_id, decide, turn=turn)
    except StoreError:
        landed = landed_claim(rt, turn_id, runner)
        if landed is None:
            raise
        with contextlib.suppress(StoreError):  # (the audit only: the claim itself is settled)
            rt.event(turn_id, "claim_settled", runner=runner, note="the claim's answer was lost; it landed")
        return Committed(turn=landed)


def _closed_batch(rt: Runtime, turn: TurnRecord) -> TurnCheckpoint | None:
    """The closed checkpoint a READY turn resumes on (read before the claim: its calls ride in it)."""
    if turn.status is not TurnStatus.READY or turn.checkpoint_id is None or turn.stop_requested is not None:
        return None
    wanted = None if rt.knows_config(turn.agent, turn.config_hash) else turn.config_hash
    cp, snapshot = rt.stores.checkpoints.get_with_config(turn.checkpoint_id, wanted)
    if snapshot is not None:
        rt.remember_config(turn.agent, turn.config_hash, snapshot)
    return cp if cp is not None and cp.closed else None


def _approved_claim(
    worker: Worker, turn: TurnRecord, cp: TurnCheckpoint | None, now: float
) -> tuple[CallRecord, ...]:
    """The claim of the first call people approved, to land with the resume's claim of the turn."""
    if cp is None or cp.denied:
        return ()
    uses = [ToolUseBlock(i.tool_use_id, i.tool, i.args) for i in cp.approved.values()]
    return first_claim(worker, worker.rt.config_of(turn), turn, uses, now)


def _start_queued(rt: Runtime, worker: Worker, turn: TurnRecord) -> TurnOutcome | None:
    """Start a queued message's turn once every earlier turn of its session has finished."""
    if not session_free(rt, turn) or turn.queued_message is None:
        return None
    history = rt.stores.sessions.load_since_compaction(turn.session_key)  # (its length is what counts)
    now = rt.stores.clock.now()
    add = Append(turn.session_key, (Message.user_text(turn.queued_message),), len(history))
    notes = _run_start(rt, turn, turn.trigger)
    event = rt.stamp("started", trigger="queued", configHash=turn.config_hash)

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        claimed = ts.claim(t, worker.runner, now, worker.lease_until(), session_free=True)
        if claimed is None or t.status is not TurnStatus.QUEUED:
            return None
        started = replace(claimed, start_seq=len(history))
        return Change(t.turn_id, turn=started, append=add, events=(event,), outbox=notes)

    try:
        done = rt.transition(turn.turn_id, decide, turn=turn)
    except VersionConflict:  # the session moved meanwhile; the sweep tries again
        return None
    if done is None:
        return None
    delivery.deliver(rt, notes)
    return advance(worker)


def _run_start(rt: Runtime, turn: TurnRecord, trigger: str) -> tuple[OutboxRecord, ...]:
    """The ``run_start`` notification of a turn that starts or resumes (none if unwanted)."""
    return delivery.announce(rt, rt.config_of(turn), turn, notifications.run_start(turn, trigger))


def session_free(rt: Runtime, turn: TurnRecord) -> bool:
    """Every turn of ``turn``'s session that came before it has finished."""
    ordered = rt.stores.turns.unfinished_session_turns(turn.session_key)  # oldest first, as the store ties
    ids = [t.turn_id for t in ordered]
    earlier = ordered[: ids.index(turn.turn_id)] if turn.turn_id in ids else ordered
    return not earlier
