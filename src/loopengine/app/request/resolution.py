"""Deciding pending items: approve (maybe with edited args), deny, answer.

A resolve only *records* the decision: one atomic write of the checkpoint (and, when the decision
closes the batch, of the turn, which becomes ready to resume) with its audit event. Nothing runs in
the request: the resume worker claims the turn and runs the approved calls. Two people clicking at
once are both recorded (compare-and-set, retried on the fresh record), and exactly one of them
closes the batch and hands the turn on. A denial runs nothing, so the request closes the turn
itself and answers ``denied`` at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from loopengine.app import faults
from loopengine.app.ports import Change
from loopengine.app.request.expiry import expire_due
from loopengine.app.request.handoff import finish_closed, hand_on, start_next_queued
from loopengine.app.runtime import Runtime
from loopengine.domain import checkpoint as cps
from loopengine.domain import turn_state as ts
from loopengine.domain.base.errors import Conflict, Forbidden, InvalidInput, NotFound, WrongKind
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.base.schema import validate_args
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint
from loopengine.domain.decisions import Approval, Denial, Reply, Verdict
from loopengine.domain.gate import Decision
from loopengine.domain.principals import Principal
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus

Decider = Principal
"""Who decides (a :class:`~loopengine.domain.principals.Principal`), recorded with every decision."""


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a resolve/answer call did."""

    already_resolved: bool = False
    outstanding: int = 0
    turn_id: str | None = None
    completed: bool = False
    denied: bool = False
    checkpoint_id: str | None = None
    expired: bool = False
    resuming: bool = False
    """A denial closed a batch that holds calls people approved: the worker runs them (within its
    time budget, never this request), then the turn finishes ``denied``."""


ALREADY = Resolution(already_resolved=True)
EXPIRED = Resolution(already_resolved=True, expired=True)


def _open_item(cp: TurnCheckpoint, pending_id: str) -> PendingItem | None:
    return None if cp.closed else cp.outstanding.get(pending_id)


def _find(
    rt: Runtime, pending_id: str, kind: str, who: Principal
) -> tuple[TurnCheckpoint, PendingItem, TurnRecord] | Resolution:
    """The open item with its checkpoint and turn (read together), or how to answer a late click.

    A click on an item that is not open is answered already / expired.

    An item of a tenant the caller cannot see does not exist for them (404, whatever its state).
    """
    found = rt.stores.checkpoints.find_with_turn(pending_id)
    cp, turn = found if found is not None else (None, None)
    if cp is not None and not who.sees_item(cp.tenant, pending_id):
        raise NotFound(f"no pending item {pending_id!r}")
    item = _open_item(cp, pending_id) if cp is not None else None
    if cp is None or item is None:
        return ALREADY
    if turn is None:
        raise NotFound(f"no turn {cp.turn_id!r}")
    if item.expires_at is not None and item.expires_at <= rt.stores.clock.now():
        expire_due(rt, turn)  # the same transition the sweep makes, just earlier
        return EXPIRED
    if item.kind != kind:
        route = (
            f"POST /pending-questions/{pending_id}/answer"
            if item.kind == "question"
            else f"POST /pending-approvals/{pending_id}/resolve"
        )
        raise WrongKind(f"{pending_id} is a pending {item.kind}; use {route}")
    return cp, item, turn


Mark = Any  # a checkpoint transition applied to an open item: (cp, item) -> cp


def _decide(
    rt: Runtime,
    turn: TurnRecord,
    cp: TurnCheckpoint,
    pending_id: str,
    mark: Mark,
    event: dict[str, Any],
    sticky: str | None = None,
    closes_as: StopReason | None = None,
) -> tuple[TurnCheckpoint, TurnRecord] | None:
    """Record one decision in one write; ``None`` if the item is no longer open (a late click).

    ``closes_as``: when the decision closes the batch with nothing left to run, the same write
    answers the batch and finishes the turn for this reason (:func:`finish_closed`).
    """
    now = rt.stores.clock.now()
    events = [event]
    if sticky is not None:
        events.append(rt.stamp("sticky_approval", tool=sticky, scope="turn", **_by(event)))

    def decide(t: TurnRecord, c: TurnCheckpoint | None) -> Change | None:
        item = _open_item(c, pending_id) if c is not None else None
        if c is None or item is None:
            return None
        after = mark(c, item)
        if after.closed and closes_as is not None:
            closing = finish_closed(rt, t, after, closes_as, tuple(events))
            if closing is not None:
                return closing
        moved: TurnRecord | None = t
        if after.closed:
            moved = ts.ready(t, c.id, now, rt.handoff_grace)
            if moved is None:  # the turn is not parked on this batch: nothing may decide it
                return None
        if sticky is not None and moved is not None:
            moved = ts.stick(moved, sticky) or moved
        changed = moved if moved is not t else None
        return Change(t.turn_id, turn=changed, checkpoint=after, events=tuple(events))

    done = rt.transition(turn.turn_id, decide, turn=turn, checkpoint=cp)
    if done is None or done.checkpoint is None:
        return None
    faults.point("decided")
    return done.checkpoint, done.turn or turn


def _by(event: dict[str, Any]) -> dict[str, Any]:
    return {k: event[k] for k in ("decidedBy", "channel") if k in event}


def resolve_approval(rt: Runtime, pending_id: str, verdict: Verdict, decider: Decider) -> Resolution:
    """Approve or deny one pending approval (see DESIGN.md "Resolve").

    An :class:`Approval` with ``scope="turn"`` also lets later calls of the same tool in this turn run
    without asking (never broader than the turn; rules that name approvers still ask each time).
    """
    if not isinstance(verdict, Approval | Denial):  # a library caller without a type checker
        raise InvalidInput("decision must be an Approval or a Denial")
    found = _find(rt, pending_id, "approval", decider)
    if isinstance(found, Resolution):
        return found
    cp, item, turn = found
    if verdict.args_hash is not None and verdict.args_hash != item.args_hash:
        raise Conflict("argsHash does not match the pending call: the request you saw has changed")
    if not decider.may_approve(item.approvers):
        raise Forbidden(f"{decider.id} is not among the approvers of this call")
    if isinstance(verdict, Denial):
        return _deny(rt, turn, cp, item, verdict, decider)
    return _approve(rt, turn, cp, item, verdict, decider)


def _deny(
    rt: Runtime, turn: TurnRecord, cp: TurnCheckpoint, item: PendingItem, verdict: Denial, decider: Decider
) -> Resolution:
    now, by, comment = rt.stores.clock.now(), decider.decided_by(), verdict.comment
    event = rt.stamp("decided", pendingId=item.pending_id, decision="deny", comment=comment, **by.fields())
    deny = lambda c, i: cps.deny(c, i, comment, by, now)  # noqa: E731
    denied = _decide(rt, turn, cp, item.pending_id, deny, event, closes_as=StopReason.DENIED)
    if denied is None:
        return ALREADY
    after, moved = denied
    if moved.status is TurnStatus.FINISHED:  # closed and finished in the decision's own write
        if moved.queued_behind:
            start_next_queued(rt, moved.session_key)
        return _report(rt, after, moved)
    hand_on(rt, moved)  # approved calls still run: the worker runs them, then finishes ``denied``
    return replace(_report(rt, after, moved), resuming=bool(after.approved))


def _approve(
    rt: Runtime, turn: TurnRecord, cp: TurnCheckpoint, item: PendingItem, verdict: Approval, decider: Decider
) -> Resolution:
    now, by, comment = rt.stores.clock.now(), decider.decided_by(), verdict.comment
    args, edited = item.args, False
    if verdict.edited_args is not None:
        args, edited = _check_edit(rt.config_of(turn), item, verdict.edited_args, decider), True
    event = rt.stamp(
        "decided",
        pendingId=item.pending_id,
        decision="approve",
        edited=edited,
        comment=comment,
        **by.fields(),
    )
    approved = _decide(
        rt,
        turn,
        cp,
        item.pending_id,
        lambda c, i: cps.approve(c, i, args, by, now, edited, comment),
        event,
        sticky=item.tool if verdict.scope == "turn" else None,
    )
    if approved is None:
        return ALREADY
    return _report(rt, *approved)


def answer_question(rt: Runtime, pending_id: str, reply: Reply, decider: Decider) -> Resolution:
    """Record the answer to a pending ``system_ask_user`` question."""
    if not isinstance(reply, Reply):  # a library caller without a type checker
        raise InvalidInput("answer must be a Reply")
    found = _find(rt, pending_id, "question", decider)
    if isinstance(found, Resolution):
        return found
    cp, item, turn = found
    answer = reply.text
    cps.check_answer(item, answer)  # one of its options, unless it allows free text: else 400
    now, by = rt.stores.clock.now(), decider.decided_by()
    event = rt.stamp("decided", pendingId=pending_id, decision="answer", **by.fields())
    answered = _decide(rt, turn, cp, pending_id, lambda c, i: cps.answer(c, i, answer, by, now), event)
    if answered is None:
        return ALREADY
    return _report(rt, *answered)


def _check_edit(config: Any, item: PendingItem, edited_args: Any, decider: Principal) -> JsonDict:
    """An edited call is a new call: valid for the tool's schema, and re-gated under its own rule.

    Its verdict deny -> 403; a rule with approvers -> the decider must be one of them (403).
    """
    if not isinstance(edited_args, dict):
        raise InvalidInput("editedArgs must be a JSON object")
    tool = config.tool(item.tool)
    if tool is None:
        raise InvalidInput(f"tool {item.tool!r} is not part of this turn's configuration")
    validate_args(tool.input_schema, edited_args, "editedArgs")
    verdict = config.rules.evaluate(item.tool, edited_args)
    if verdict.decision is Decision.DENY:
        raise Forbidden("the rules deny this call with the edited arguments")
    if not decider.may_approve(verdict.approvers):
        raise Forbidden(f"{decider.id} may not approve this call with the edited arguments: {verdict.reason}")
    return edited_args


def _report(rt: Runtime, after: TurnCheckpoint, turn: TurnRecord) -> Resolution:
    """Report; if this decision closed an approved/answered batch, hand the turn on."""
    if after.closed and not after.denied:
        hand_on(rt, turn)
    return Resolution(
        outstanding=len(after.outstanding),
        turn_id=after.turn_id,
        completed=after.closed,
        denied=after.denied,
        checkpoint_id=after.id,
    )


def _turn(rt: Runtime, turn_id: str) -> TurnRecord:
    turn = rt.stores.turns.get_turn(turn_id)
    if turn is None:
        raise NotFound(f"no turn {turn_id!r}")
    return turn
