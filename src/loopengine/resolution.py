"""Deciding pending items: approve (maybe with edited args), deny, answer; and resuming turns.

Every change to a checkpoint is a compare-and-set read-modify-write (:func:`modify`), so two
people clicking at once both get recorded and exactly one of them completes the batch. The
writer whose change makes the checkpoint complete is the one that hands the turn on, and the
resume itself is claimed with a compare-and-set on the turn, so a duplicate delivery does nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from loopengine import checkpoint as cps
from loopengine import outcomes
from loopengine.batch import run_call
from loopengine.checkpoint import PendingItem, TurnCheckpoint
from loopengine.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    VersionConflict,
    WrongKind,
)
from loopengine.gate import Decision
from loopengine.loop import TurnOutcome, advance
from loopengine.messages import ToolResultBlock, ToolUseBlock, block_from_dict
from loopengine.runtime import Runtime
from loopengine.schema import validate_args
from loopengine.turns import TurnRecord, TurnStatus

JsonDict = dict[str, Any]
MAX_CAS_ATTEMPTS = 50


@dataclass(frozen=True)
class Decider:
    """Who decides, and through which channel (recorded with every decision)."""

    identity: str
    channel: str = "api"
    groups: tuple[str, ...] = ()

    def record(self) -> JsonDict:
        """The audit fields of this decider."""
        return {"decidedBy": self.identity, "channel": self.channel}


@dataclass(frozen=True)
class Resolution:
    """What a resolve/answer call did."""

    already_resolved: bool = False
    outstanding: int = 0
    turn_id: str | None = None
    completed: bool = False
    denied: bool = False
    checkpoint_id: str | None = None


ALREADY = Resolution(already_resolved=True)


def modify(
    rt: Runtime, cp_id: str, fn: Callable[[TurnCheckpoint], TurnCheckpoint | None]
) -> tuple[TurnCheckpoint, TurnCheckpoint] | None:
    """Apply ``fn`` atomically; returns (before, after), or ``None`` when ``fn`` declines."""
    store = rt.stores.checkpoints
    current = store.get(cp_id)
    for _ in range(MAX_CAS_ATTEMPTS):
        if current is None:
            return None
        changed = fn(current)
        if changed is None:
            return None
        try:
            return current, store.replace(changed)
        except VersionConflict as conflict:
            current = conflict.current
    raise Conflict(f"checkpoint {cp_id} is too contended; try again")


def _open_item(cp: TurnCheckpoint, pending_id: str) -> PendingItem | None:
    return None if cp.closed else cp.outstanding.get(pending_id)


def _find(rt: Runtime, pending_id: str, kind: str) -> tuple[TurnCheckpoint, PendingItem] | None:
    cp = rt.stores.checkpoints.find_by_pending(pending_id)
    item = _open_item(cp, pending_id) if cp is not None else None
    if cp is None or item is None:
        return None
    if item.kind != kind:
        route = (
            f"POST /pending-questions/{pending_id}/answer"
            if item.kind == "question"
            else f"POST /pending-approvals/{pending_id}/resolve"
        )
        raise WrongKind(f"{pending_id} is a pending {item.kind}; use {route}")
    return cp, item


def resolve_approval(
    rt: Runtime,
    pending_id: str,
    decision: str,
    decider: Decider,
    edited_args: Any = None,
    comment: str | None = None,
    args_hash: str | None = None,
) -> Resolution:
    """Approve or deny one pending approval (see DESIGN.md "Resolve")."""
    if decision not in ("approve", "deny"):
        raise InvalidInput("decision must be 'approve' or 'deny'")
    found = _find(rt, pending_id, "approval")
    if found is None:
        return ALREADY
    cp, item = found
    if args_hash is not None and args_hash != item.args_hash:
        raise Conflict("argsHash does not match the pending call: the request you saw has changed")
    if item.approvers and not ({decider.identity, *decider.groups} & set(item.approvers)):
        raise Forbidden(f"{decider.identity} is not among the approvers of this call")
    turn = _turn(rt, cp.turn_id)
    config = rt.config_of(turn)
    now, by = rt.stores.clock.now(), decider.record()
    if decision == "deny":
        changed = modify(rt, cp.id, lambda c: _if_open(c, pending_id, cps.deny, comment, by, now))
        if changed is None:
            return ALREADY
        rt.event(turn.turn_id, "decided", pendingId=pending_id, decision="deny", comment=comment, **by)
        return _after(rt, turn.turn_id, *changed)
    args, edited = item.args, False
    if edited_args is not None:
        args, edited = _check_edit(config, item, edited_args), True
    changed = modify(rt, cp.id, lambda c: _if_open(c, pending_id, cps.claim_approval, args, by, now, edited))
    if changed is None:
        return ALREADY
    rt.event(turn.turn_id, "decided", pendingId=pending_id, decision="approve", edited=edited, **by)
    use = ToolUseBlock(item.tool_use_id, item.tool, args)
    result = run_call(rt, config, turn.turn_id, use, edited)
    done = modify(rt, cp.id, lambda c: _add_result(c, pending_id, result))
    if done is None:  # a recovery already reported this call as unknown
        return Resolution(turn_id=turn.turn_id, completed=changed[1].closed)
    return _after(rt, turn.turn_id, *done)


def _add_result(cp: TurnCheckpoint, pending_id: str, result: ToolResultBlock) -> TurnCheckpoint | None:
    return cps.add_result(cp, pending_id, result) if pending_id in cp.inflight else None


def answer_question(rt: Runtime, pending_id: str, answer: Any, decider: Decider) -> Resolution:
    """Record the answer to a pending ``system_ask_user`` question."""
    if not isinstance(answer, str) or not answer.strip():
        raise InvalidInput("answer must be a non-empty string")
    found = _find(rt, pending_id, "question")
    if found is None:
        return ALREADY
    cp, _item = found
    now, by = rt.stores.clock.now(), decider.record()
    changed = modify(rt, cp.id, lambda c: _if_open(c, pending_id, cps.answer, answer, by, now))
    if changed is None:
        return ALREADY
    rt.event(cp.turn_id, "decided", pendingId=pending_id, decision="answer", **by)
    return _after(rt, cp.turn_id, *changed)


def _if_open(cp: TurnCheckpoint, pending_id: str, fn: Any, *args: Any) -> TurnCheckpoint | None:
    item = _open_item(cp, pending_id)
    return None if item is None else fn(cp, item, *args)


def _check_edit(config: Any, item: PendingItem, edited_args: Any) -> JsonDict:
    if not isinstance(edited_args, dict):
        raise InvalidInput("editedArgs must be a JSON object")
    tool = config.tool(item.tool)
    if tool is None:
        raise InvalidInput(f"tool {item.tool!r} is not part of this turn's configuration")
    validate_args(tool.input_schema, edited_args, "editedArgs")
    if config.rules.evaluate(item.tool, edited_args).decision is Decision.DENY:
        raise InvalidInput("the rules deny this call with the edited arguments")
    return edited_args


def _after(rt: Runtime, turn_id: str, before: TurnCheckpoint, after: TurnCheckpoint) -> Resolution:
    """Report, and if this write completed the batch, hand the turn on (exactly once)."""
    completed = after.complete and not before.complete
    if completed:
        if after.denied:
            resume_turn(rt, turn_id)  # no model call: append the results and finish as denied
        else:
            rt.invoker.invoke(turn_id)
    return Resolution(
        outstanding=len(after.outstanding),
        turn_id=turn_id,
        completed=after.closed,
        denied=after.denied,
        checkpoint_id=after.id,
    )


def resume_turn(rt: Runtime, turn_id: str, deadline: float | None = None) -> TurnOutcome | None:
    """Claim and advance a turn whose batch is complete; ``None`` when there is nothing to do.

    Safe to call any number of times for the same turn (at-least-once delivery): only a paused
    turn with a complete checkpoint, or a running turn whose lease expired, can be claimed, and
    the claim is a compare-and-set.
    """
    turn = _turn(rt, turn_id)
    now = rt.stores.clock.now()
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
    rt.event(turn_id, "resumed")
    config = rt.config_of(turn)
    payload = {"turnId": turn_id, "sessionId": turn.session_id, "agent": turn.agent}
    rt.notify(config, turn_id, "run_start", {**payload, "tenant": turn.tenant, "trigger": "resume"})
    return advance(rt, turn_id, deadline)


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


def _turn(rt: Runtime, turn_id: str) -> TurnRecord:
    turn = rt.stores.turns.get_turn(turn_id)
    if turn is None:
        raise NotFound(f"no turn {turn_id!r}")
    return turn
