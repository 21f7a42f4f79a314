"""A turn's life outside the loop: claiming it, stopping it, expiring its items, the sweep.

Every change here is a transition of :mod:`loopengine.domain.turn_state`, written with its checkpoint,
audit events and notifications in one atomic write (:meth:`Runtime.transition`), so a duplicate
delivery, a late click or a second stop request finds nothing to do.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loopengine.app import delivery, expiry, faults
from loopengine.app.claims import first_claim
from loopengine.app.loop import advance
from loopengine.app.ports import Append, Change
from loopengine.app.runtime import Runtime
from loopengine.app.worker import TurnOutcome, Worker, hand_on, outcome_of
from loopengine.domain import checkpoint as cps
from loopengine.domain import notifications
from loopengine.domain import turn_state as ts
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.decisions import DecidedBy
from loopengine.domain.errors import AlreadyExists, NotFound, VersionConflict
from loopengine.domain.frozen import frozen
from loopengine.domain.ids import new_id
from loopengine.domain.messages import Message, ToolUseBlock
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.turns import CallRecord, StopReason, TurnRecord, TurnStatus

ABANDONED = {
    StopReason.SUPERSEDED: (
        "the user moved on with a new message before anyone answered; "
        "this call was neither approved nor denied and did not run"
    ),
    StopReason.CANCELLED: "the turn was cancelled before anyone answered; this call did not run",
}


def resume_turn(
    rt: Runtime, turn_id: str, deadline: float | None = None, hard_limit: float | None = None
) -> TurnOutcome | None:
    """Claim and advance a turn that can move on; ``None`` when there is nothing to do.

    Safe to call any number of times for the same turn (at-least-once delivery): the claim is a
    compare-and-set of :func:`loopengine.domain.turn_state.claim`, which only a READY turn, a RETRYING one
    that is due, a RUNNING one whose lease ran out or a QUEUED one whose session is free passes.
    """
    turn = _turn(rt, turn_id)
    if turn.status not in ts.CLAIMABLE:
        return None
    runner = new_id("run_")
    worker = Worker(rt, turn_id, runner, deadline, hard_limit)
    if turn.status is TurnStatus.QUEUED:
        return _start_queued(rt, worker, turn)
    now = rt.stores.clock.now()
    notes = _run_start(rt, turn, "resume")
    sent: list[tuple[Any, ...]] = []
    worker.closing = _closed_batch(rt, turn)
    claims = _approved_claim(worker, turn, worker.closing, now)

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        sent.clear()
        claimed = ts.claim(t, runner, now, worker.lease_until())
        if claimed is None:
            return None
        if claimed.stop_requested is not None:
            return Change(turn_id, turn=claimed)  # a stopping turn only closes; nothing is announced
        sent.append(notes)
        events = (rt.stamp("resumed", claimedFrom=t.status.value),)
        fresh = claims if t.status is TurnStatus.READY and t.checkpoint_id == turn.checkpoint_id else ()
        return Change(turn_id, turn=claimed, events=events, outbox=notes, claims=fresh)

    try:
        done = rt.transition(turn_id, decide, turn=turn)
    except AlreadyExists:  # a call was claimed before (a runner died, or handed off mid-batch)
        claims = ()  # claim the turn alone; those calls answer from their records
        done = rt.transition(turn_id, decide, turn=turn)
    if done is None:
        return None  # someone else claimed it, or it is not claimable yet
    if done.turn is not None and done.turn.stop_requested is None:
        worker.claimed = {c.tool_use_id: c for c in claims}
    faults.point("claimed")
    for records in sent:
        delivery.deliver(rt, records)
    return advance(worker, done.turn)


def _closed_batch(rt: Runtime, turn: TurnRecord) -> TurnCheckpoint | None:
    """The closed checkpoint a READY turn resumes on (read before the claim: its calls ride in it)."""
    if turn.status is not TurnStatus.READY or turn.checkpoint_id is None or turn.stop_requested is not None:
        return None
    cp = rt.stores.checkpoints.get(turn.checkpoint_id)
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
    history = rt.stores.sessions.load(turn.session_key)
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


def request_stop(rt: Runtime, turn_id: str, reason: StopReason, by: DecidedBy) -> TurnRecord:
    """Stop a turn for ``reason`` (cancelled or superseded) as soon as it safely can.

    Parked: its open items are abandoned (recorded as ``unknown``, never as denied or failed) in
    the same write that makes it ready, and it closes now (nothing runs). Running: it stops at the
    next step boundary (between model and tool calls); calls already running finish, nothing new
    starts. Queued: it never starts. Finished: nothing changes. What was done is not undone.
    """
    turn = _turn(rt, turn_id)
    now = rt.stores.clock.now()
    why = ABANDONED.get(reason, ABANDONED[StopReason.CANCELLED])
    event = rt.stamp("stop_requested", reason=reason.value, **by.fields())

    def decide(t: TurnRecord, cp: TurnCheckpoint | None) -> Change | None:
        if t.status is TurnStatus.PAUSED and cp is not None and not cp.closed and t.checkpoint_id == cp.id:
            stopped = ts.stop_parked(t, reason, now, rt.handoff_grace)
            closed = cps.abandon(cp, why, by, now)
            return (
                None if stopped is None else Change(turn_id, turn=stopped, checkpoint=closed, events=(event,))
            )
        flagged = ts.request_stop(t, reason, now)
        return None if flagged is None else Change(turn_id, turn=flagged, events=(event,))

    done = rt.transition(turn_id, decide, turn=turn, checkpoint_id=turn.checkpoint_id)
    after = done.turn if done is not None and done.turn is not None else _turn(rt, turn_id)
    stopping = after.status in (TurnStatus.READY, TurnStatus.RETRYING) and after.stop_requested is not None
    if stopping and not _approved_calls_waiting(rt, after):
        resume_turn(rt, turn_id)  # closes the batch and finishes; nothing runs
    return _turn(rt, turn_id)


def _approved_calls_waiting(rt: Runtime, turn: TurnRecord) -> bool:
    if turn.checkpoint_id is None:
        return False
    cp = rt.stores.checkpoints.get(turn.checkpoint_id)
    return cp is not None and bool(cp.approved)


@frozen
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


def sweep(rt: Runtime, limit: int = 100) -> SweepResult:
    """The periodic pass that finds every stalled turn (see :mod:`loopengine.domain.turn_state`).

    Due turns: a PAUSED one has items past their ttl (expired by policy); a RUNNING one lost its
    runner (its lease ran out), a READY one was never claimed (the invoke failed or was lost), a
    RETRYING one's retry time came, a QUEUED one may start: each is handed to the resume worker,
    whose claim is a compare-and-set, so a turn handed on twice still runs once. Then every
    notification that is due is sent again.
    """
    now = rt.stores.clock.now()
    expired = recovered = failed = 0
    due = rt.stores.turns.due_turns(now, limit)
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
    notified = delivery.deliver_due(rt, limit)
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
        rt.event(turn.turn_id, "sweep_handed_on", for_agent=turn.agent, status=turn.status.value)
        hand_on(rt, turn)
        return 1
    return 0


def _note_failure(rt: Runtime, turn_id: str, exc: Exception) -> None:
    try:
        rt.event(turn_id, "sweep_failed", error=f"{type(exc).__name__}: {exc}")
    except Exception:
        return


def outcome(rt: Runtime, turn_id: str) -> TurnOutcome:
    """The turn's current outcome, with its open pending items."""
    turn = _turn(rt, turn_id)
    pending = []
    if turn.status is TurnStatus.PAUSED and turn.checkpoint_id:
        cp = rt.stores.checkpoints.get(turn.checkpoint_id)
        if cp is not None and not cp.closed:
            pending = list(cp.outstanding.values())
    return outcome_of(turn, pending)


def _turn(rt: Runtime, turn_id: str) -> TurnRecord:
    turn = rt.stores.turns.get_turn(turn_id)
    if turn is None:
        raise NotFound(f"no turn {turn_id!r}")
    return turn
