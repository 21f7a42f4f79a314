r"""A turn's life outside the loop: resuming, starting queued messages, stopping, expiring.

    QUEUED --(session free)--> RUNNING <--(batch complete: resume)-- PAUSED
                                  |  \\--(pending items)--> PAUSED
                                  v
                               FINISHED  (end_turn, denied, superseded, cancelled, error, ...)

Every transition is a compare-and-set on the turn (``Runtime.update_turn``), so a duplicate
delivery, a late click or a second stop request finds nothing to do.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from loopengine import checkpoint as cps
from loopengine import outcomes
from loopengine.cas import modify
from loopengine.checkpoint import TurnCheckpoint
from loopengine.errors import NotFound, VersionConflict
from loopengine.loop import TurnOutcome, advance, outcome_of
from loopengine.messages import Message, ToolResultBlock, block_from_dict
from loopengine.policy import describe
from loopengine.runtime import Runtime
from loopengine.turns import StopReason, TurnRecord, TurnStatus

JsonDict = dict[str, Any]

ABANDONED = {
    StopReason.SUPERSEDED: (
        "the user moved on with a new message before anyone answered; "
        "this call was neither approved nor denied and did not run"
    ),
    StopReason.CANCELLED: "the turn was cancelled before anyone answered; this call did not run",
}


def resume_turn(rt: Runtime, turn_id: str, deadline: float | None = None) -> TurnOutcome | None:
    """Claim and advance a turn that can move on; ``None`` when there is nothing to do.

    Safe to call any number of times for the same turn (at-least-once delivery): only a paused
    turn with a complete checkpoint, a queued turn whose session is free, or a running turn whose
    lease expired can be claimed, and the claim is a compare-and-set.
    """
    turn = _turn(rt, turn_id)
    now = rt.stores.clock.now()
    if turn.status is TurnStatus.QUEUED:
        return _start_queued(rt, turn, deadline)
    if turn.status is TurnStatus.PAUSED:
        cp = rt.stores.checkpoints.get(turn.checkpoint_id or "")
        if cp is None or not _recover_stale(rt, cp).complete:
            return None
    elif turn.status is not TurnStatus.RUNNING or turn.lease_until > now:
        return None
    try:
        turn = rt.stores.turns.replace_turn(
            replace(turn, status=TurnStatus.RUNNING, lease_until=now + rt.lease_seconds)
        )
    except VersionConflict:
        return None  # someone else claimed it
    if turn.stop_requested is None:  # a stopping turn only closes its batch; it does not run again
        rt.event(turn_id, "resumed")
        _run_start(rt, turn, "resume")
    return advance(rt, turn_id, deadline)


def _start_queued(rt: Runtime, turn: TurnRecord, deadline: float | None) -> TurnOutcome | None:
    """Start a queued message's turn once every earlier turn of its session has finished."""
    ordered = rt.stores.turns.session_turns(turn.session_id)  # oldest first, ties broken by the store
    ids = [t.turn_id for t in ordered]
    earlier = ordered[: ids.index(turn.turn_id)] if turn.turn_id in ids else ordered
    if any(t.status is not TurnStatus.FINISHED for t in earlier) or turn.queued_message is None:
        return None
    history = rt.stores.sessions.load(turn.session_id)
    now = rt.stores.clock.now()

    def claim(t: TurnRecord) -> TurnRecord | None:
        if t.status is not TurnStatus.QUEUED:
            return None
        lease = now + rt.lease_seconds
        return replace(t, status=TurnStatus.RUNNING, start_seq=len(history), lease_until=lease)

    claimed = rt.update_turn(turn.turn_id, claim)
    if claimed is None:
        return None
    rt.stores.sessions.append(turn.session_id, [Message.user_text(turn.queued_message)], len(history))
    rt.event(turn.turn_id, "started", trigger="queued", configHash=turn.config_hash)
    _run_start(rt, claimed, claimed.trigger)
    return advance(rt, turn.turn_id, deadline)


def request_stop(rt: Runtime, turn_id: str, reason: StopReason, by: JsonDict) -> TurnRecord:
    """Stop a turn for ``reason`` (cancelled or superseded) as soon as it safely can.

    Parked: its open items are abandoned (recorded as ``unknown``, never as denied or failed) and
    the turn finishes now. Running: it stops at the next step boundary (between model and tool
    calls); calls already running finish, nothing new starts. Queued: it never starts. Finished:
    nothing changes. What was already done is not undone.
    """

    def flag(t: TurnRecord) -> TurnRecord | None:
        if t.status is TurnStatus.FINISHED or t.stop_requested is not None:
            return None
        if t.status is TurnStatus.QUEUED:
            return replace(t, status=TurnStatus.FINISHED, stop_reason=reason, stop_requested=reason)
        return replace(t, stop_requested=reason)

    flagged = rt.update_turn(turn_id, flag)
    if flagged is not None:
        rt.event(turn_id, "stop_requested", reason=reason.value, **by)
    turn = flagged or _turn(rt, turn_id)
    if turn.status is TurnStatus.PAUSED and turn.checkpoint_id:
        why = ABANDONED.get(reason, ABANDONED[StopReason.CANCELLED])
        now = rt.stores.clock.now()
        modify(rt, turn.checkpoint_id, lambda c: None if c.closed else cps.abandon(c, why, by, now))
        resume_turn(rt, turn_id)  # closes the batch and finishes, unless an approved call still runs
    return _turn(rt, turn_id)


def expire_due(rt: Runtime, cp: TurnCheckpoint) -> TurnCheckpoint:
    """Apply the expiry policy to every item of ``cp`` past its deadline; resume if that completes it."""
    now = rt.stores.clock.now()

    def expire(c: TurnCheckpoint) -> TurnCheckpoint | None:
        due = [i for i in c.outstanding.values() if i.expires_at is not None and i.expires_at <= now]
        if c.closed or not due:
            return None
        for item in due:
            waited = describe(round((item.expires_at or now) - c.created_at))
            c = cps.expire(c, item, now, waited)
        return c

    changed = modify(rt, cp.id, expire)
    if changed is None:
        return cp
    before, after = changed
    for pending_id in set(before.outstanding) - set(after.outstanding):
        rt.event(cp.turn_id, "expired", pendingId=pending_id, decidedBy="policy")
    if after.complete and not before.complete:
        rt.invoker.invoke(cp.turn_id, _turn(rt, cp.turn_id).code_version)
    return after


@dataclass(frozen=True)
class SweepResult:
    """What one sweep did: pending items it expired, stale running turns it handed on."""

    expired: int = 0
    recovered: int = 0


def sweep(rt: Runtime) -> SweepResult:
    """The schedule Lambda's periodic pass: expire due pending items, hand on orphaned turns.

    A running turn whose lease ran out lost its runner (a Lambda timeout or crash): it is handed to
    the resume invoker, which continues it from its records (a call started but never finished is
    reported ``unknown``, never re-run). The claim in :func:`resume_turn` is a compare-and-set, so
    a turn handed on twice, or one whose runner was merely slow, still runs once.
    """
    now = rt.stores.clock.now()
    expired = 0
    for cp in rt.stores.checkpoints.list_open():
        due = [i for i in cp.outstanding.values() if i.expires_at is not None and i.expires_at <= now]
        if due:
            expired += len(cp.outstanding) - len(expire_due(rt, cp).outstanding)
    stale = rt.stores.turns.expired_leases(now)
    for turn in stale:
        rt.invoker.invoke(turn.turn_id, turn.code_version)
    return SweepResult(expired, len(stale))


def _recover_stale(rt: Runtime, cp: TurnCheckpoint) -> TurnCheckpoint:
    """Settle approved calls whose runner died mid-way (never re-run).

    A call whose outcome was recorded gets that result; one with no outcome by the stale cutoff
    gets an ``unknown`` result; one still within the cutoff is left to its runner.
    """
    calls = rt.stores.turns.calls(cp.turn_id)
    cutoff = rt.stores.clock.now() - rt.stale_call_seconds
    decided = {d["pendingId"]: float(d["at"]) for d in cp.decisions}
    for pid, item in cp.inflight.items():
        call = calls.get(item.tool_use_id)
        if call is not None and call.result is not None:
            # the runner recorded the outcome but died before the checkpoint learnt it
            recorded = block_from_dict(call.result)
            assert isinstance(recorded, ToolResultBlock)
            result = recorded
        elif (call.started_at if call is not None else decided.get(pid, 0.0)) < cutoff:
            result = outcomes.unknown(item.tool_use_id, outcomes.CRASHED)
        else:
            continue  # its runner may still be working on it
        changed = modify(rt, cp.id, functools.partial(_add_result, pending_id=pid, result=result))
        if changed is not None:
            cp = changed[1]
    return cp


def _add_result(cp: TurnCheckpoint, pending_id: str, result: ToolResultBlock) -> TurnCheckpoint | None:
    return cps.add_result(cp, pending_id, result) if pending_id in cp.inflight else None


def _run_start(rt: Runtime, turn: TurnRecord, trigger: str) -> None:
    config = rt.config_of(turn)
    payload = {"turnId": turn.turn_id, "sessionId": turn.session_id, "agent": turn.agent}
    rt.notify(config, turn.turn_id, "run_start", {**payload, "tenant": turn.tenant, "trigger": trigger})


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
