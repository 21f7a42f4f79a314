"""Deciding pending items: approve (maybe with edited args), deny, answer.

Every change to a checkpoint is a compare-and-set read-modify-write (:func:`~loopengine.cas.modify`), so two
people clicking at once both get recorded and exactly one of them completes the batch. The
writer whose change makes the checkpoint complete is the one that hands the turn on, and the
resume itself is claimed with a compare-and-set on the turn, so a duplicate delivery does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from loopengine import checkpoint as cps
from loopengine.batch import run_call
from loopengine.cas import modify
from loopengine.checkpoint import PendingItem, TurnCheckpoint
from loopengine.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    WrongKind,
)
from loopengine.gate import Decision
from loopengine.lifecycle import expire_due, resume_turn
from loopengine.messages import ToolResultBlock, ToolUseBlock
from loopengine.runtime import Runtime
from loopengine.schema import validate_args
from loopengine.turns import TurnRecord

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
    expired: bool = False


ALREADY = Resolution(already_resolved=True)
EXPIRED = Resolution(already_resolved=True, expired=True)


def _open_item(cp: TurnCheckpoint, pending_id: str) -> PendingItem | None:
    return None if cp.closed else cp.outstanding.get(pending_id)


def _find(rt: Runtime, pending_id: str, kind: str) -> tuple[TurnCheckpoint, PendingItem] | Resolution:
    """The open item, or how to answer a click on one that is not open (already / expired)."""
    cp = rt.stores.checkpoints.find_by_pending(pending_id)
    item = _open_item(cp, pending_id) if cp is not None else None
    if cp is None or item is None:
        return ALREADY
    if item.expires_at is not None and item.expires_at <= rt.stores.clock.now():
        expire_due(rt, cp)  # the same answer the sweep would have given, just earlier
        return EXPIRED
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
    scope: str | None = None,
) -> Resolution:
    """Approve or deny one pending approval (see DESIGN.md "Resolve").

    ``scope="turn"`` with an approval also lets later calls of the same tool in this turn run
    without asking (never broader than the turn; rules that name approvers still ask each time).
    """
    if decision not in ("approve", "deny"):
        raise InvalidInput("decision must be 'approve' or 'deny'")
    if scope not in (None, "turn"):
        raise InvalidInput("scope must be 'turn' (or left out)")
    found = _find(rt, pending_id, "approval")
    if isinstance(found, Resolution):
        return found
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
    rt.event(
        turn.turn_id,
        "decided",
        pendingId=pending_id,
        decision="approve",
        edited=edited,
        comment=comment,
        **by,
    )
    if scope == "turn":
        rt.update_turn(turn.turn_id, lambda t: _stick(t, item.tool))
        rt.event(turn.turn_id, "sticky_approval", tool=item.tool, scope="turn", **by)
    use = ToolUseBlock(item.tool_use_id, item.tool, args)
    result = run_call(rt, config, turn.turn_id, use, edited)
    done = modify(rt, cp.id, lambda c: _add_result(c, pending_id, result))
    if done is None:  # a recovery already reported this call as unknown
        return Resolution(turn_id=turn.turn_id, completed=changed[1].closed)
    return _after(rt, turn.turn_id, *done)


def _stick(turn: TurnRecord, tool: str) -> TurnRecord | None:
    return None if tool in turn.sticky_tools else replace(turn, sticky_tools=(*turn.sticky_tools, tool))


def _add_result(cp: TurnCheckpoint, pending_id: str, result: ToolResultBlock) -> TurnCheckpoint | None:
    return cps.add_result(cp, pending_id, result) if pending_id in cp.inflight else None


def answer_question(rt: Runtime, pending_id: str, answer: Any, decider: Decider) -> Resolution:
    """Record the answer to a pending ``system_ask_user`` question."""
    if not isinstance(answer, str) or not answer.strip():
        raise InvalidInput("answer must be a non-empty string")
    found = _find(rt, pending_id, "question")
    if isinstance(found, Resolution):
        return found
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
            rt.invoker.invoke(turn_id, _turn(rt, turn_id).code_version)
    return Resolution(
        outstanding=len(after.outstanding),
        turn_id=turn_id,
        completed=after.closed,
        denied=after.denied,
        checkpoint_id=after.id,
    )


def _turn(rt: Runtime, turn_id: str) -> TurnRecord:
    turn = rt.stores.turns.get_turn(turn_id)
    if turn is None:
        raise NotFound(f"no turn {turn_id!r}")
    return turn
