"""One model response's tool calls: bucket them, run the allowed ones exactly once.

Bucketing looks at every tool_use before anything runs, so the result does not depend on the
order the model listed them in: allowed calls run, denied ones get a synthesized result, the rest
(``ask`` verdicts and ``system_ask_user`` questions) wait for a human. A synchronous denial cancels
the whole batch: nothing in it runs, siblings are reported ``skipped``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from loopengine.app import faults
from loopengine.app.runtime import Runtime
from loopengine.app.worker.tool_calls import Ending, run_tool
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.context import ToolContext, idempotency_key
from loopengine.authoring.tools import ASK_USER, ASK_USER_SPEC, args_hash, result_text
from loopengine.domain import notifications, outcomes
from loopengine.domain.base.errors import InvalidInput, StoreError, ToolOutcomeUnknown
from loopengine.domain.base.ids import new_id
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.base.schema import validate_args
from loopengine.domain.checkpoint import PendingItem
from loopengine.domain.decisions import Approve
from loopengine.domain.gate import Decision, Verdict
from loopengine.domain.messages import ToolResultBlock, ToolUseBlock, block_from_dict
from loopengine.domain.notifications import ApprovalEvent, QuestionEvent
from loopengine.domain.policy import Expiry
from loopengine.domain.turns import CallRecord, StopReason, TurnRecord

T = TypeVar("T")


@dataclass
class BatchPlan:
    """The buckets of one batch, plus calls the model got wrong (answered with an error at once)."""

    allowed: list[ToolUseBlock] = field(default_factory=list)
    denied: list[ToolUseBlock] = field(default_factory=list)
    pending: list[PendingItem] = field(default_factory=list)
    invalid: dict[str, ToolResultBlock] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    sticky: list[str] = field(default_factory=list)


def plan_batch(
    config: AgentConfig,
    uses: list[ToolUseBlock],
    verdicts: dict[str, JsonDict],
    now: float,
    sticky_tools: tuple[str, ...] = (),
) -> BatchPlan:
    """Sort every call of the batch into allowed / denied / pending using recorded verdicts.

    A call to a tool the agent does not have, or with arguments its schema rejects, is answered
    with an error result right away: it never runs and no human is asked to approve it. An ``ask``
    for a tool a reviewer approved "for the rest of the turn" (``sticky_tools``) runs, unless its
    rule names approvers (those want a person each time).
    """
    plan = BatchPlan()
    for use in uses:
        problem = _problem(config, use)
        if problem is not None:
            plan.invalid[use.id] = outcomes.failed(use.id, problem)
            continue
        if use.name == ASK_USER:
            plan.pending.append(_item(use, "question", "the model asked the user", (), config.expiry, now))
            continue
        verdict = Verdict.from_dict(verdicts[use.id])
        plan.reasons[use.id] = verdict.reason
        if verdict.decision is Decision.ALLOW:
            plan.allowed.append(use)
        elif verdict.decision is Decision.DENY:
            plan.denied.append(use)
        elif use.name in sticky_tools and not verdict.approvers:
            plan.allowed.append(use)
            plan.sticky.append(use.id)
        else:
            expiry = verdict.expiry or config.expiry
            plan.pending.append(_item(use, "approval", verdict.reason, verdict.approvers, expiry, now))
    return plan


def _problem(config: AgentConfig, use: ToolUseBlock) -> str | None:
    schema = ASK_USER_SPEC["input_schema"] if use.name == ASK_USER else None
    if schema is None:
        tool = config.tool(use.name)
        if tool is None:
            return f"unknown tool {use.name!r}; available: {', '.join(t.name for t in config.tools)}"
        schema = tool.input_schema
    try:
        validate_args(schema, use.input, "arguments")
    except InvalidInput as exc:
        return str(exc)
    return None


def _item(
    use: ToolUseBlock,
    kind: Any,
    reason: str,
    approvers: tuple[str, ...],
    expiry: Expiry | None,
    now: float,
) -> PendingItem:
    return PendingItem(
        expires_at=now + expiry.ttl_seconds if expiry else None,
        on_expiry=expiry.on_expiry if expiry else "unknown",
        pending_id=new_id("pnd_"),
        tool_use_id=use.id,
        tool=use.name,
        args=use.input,
        reason=reason,
        kind=kind,
        args_hash=args_hash(use.name, use.input),
        approvers=approvers,
    )


@dataclass(frozen=True, slots=True)
class Ran:
    """A call's result in hand, and what the next transition must record for it.

    ``record`` (the call's outcome) and ``event`` (its ``tool_outcome`` audit event) ride in the
    write that hands the result on: the results message, the checkpoint of a pause, the finish or
    the hand-off (:attr:`~loopengine.app.ports.Change.calls`). Both are ``None`` for a result that
    is on record already (a finished call answered from its stored outcome).
    """

    result: ToolResultBlock
    record: CallRecord | None = None
    event: JsonDict | None = None


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call to run, and what its :class:`ToolContext` tells the tool.

    ``use``: the model's call with the arguments that run; ``edited``: a reviewer changed them;
    ``approval``: the person's decision; ``proposed``: the model's arguments before the edit.
    """

    use: ToolUseBlock
    edited: bool = False
    approval: Approve | None = None
    proposed: JsonDict | None = None


def run_call(
    rt: Runtime, config: AgentConfig, turn: TurnRecord, call: Call, claim: CallRecord | None = None
) -> Ran:
    """Run one call at most once: claimed before it runs, the outcome handed back to record.

    ``claim``: the call's claim, written by the caller in its own transition (the model's response,
    the resume's claim); without one the call is claimed here on its own. A call already finished
    returns its recorded result; a call already started with no outcome (the process died
    mid-call) is never re-run: its result is ``unknown``. The tool runs within its timeout and gets
    a :class:`ToolContext` if it asks (see :class:`Call`); a call that timed out or was left
    running when the turn stopped is ``unknown`` too. The outcome's audit event carries the call's
    idempotency key.
    """
    turns, clock, use = rt.stores.turns, rt.stores.clock, call.use
    key = idempotency_key(turn.tenant, turn.turn_id, use.id)
    record = claim or claim_of(turn, use, clock.now())
    if claim is None and not turns.start_call(record):
        existing = turns.calls(turn.turn_id)[use.id]
        if existing.result is not None:
            return Ran(_as_result(existing.result))
        return _ran(rt, existing, "unknown", outcomes.unknown(use.id, outcomes.CRASHED), idempotencyKey=key)
    faults.point("tool_claimed")
    outcome, result, notes = _execute(rt, config, turn, call)
    faults.point("tool_returned")
    return _ran(rt, record, outcome, result, idempotencyKey=key, **notes)


def claim_of(turn: TurnRecord, use: ToolUseBlock, now: float) -> CallRecord:
    """The claim of a call that is about to run, to ride in the transition that decides it runs."""
    return CallRecord(turn.turn_id, use.id, use.name, now)


def _execute(
    rt: Runtime, config: AgentConfig, turn: TurnRecord, call: Call
) -> tuple[str, ToolResultBlock, JsonDict]:
    """Run the claimed call: (outcome, result, extra audit fields)."""
    use = call.use
    tool = config.tool(use.name)
    if tool is None:
        return "error", outcomes.failed(use.id, f"unknown tool {use.name!r}"), {}
    try:
        validate_args(tool.input_schema, use.input, "arguments")
    except InvalidInput as exc:
        return "error", outcomes.failed(use.id, str(exc)), {}
    ctx = _context(rt, config, turn, call)
    ran = run_tool(tool, use.input, ctx, lambda: stop_requested(rt, turn.turn_id) is not None)
    if ran.ending is Ending.TIMED_OUT:
        why = f"it did not finish within its timeout of {ctx.timeout:g} s and may still have had an effect"
        return "unknown", outcomes.unknown(use.id, f"{why}; it was not retried"), {"timedOut": True}
    if ran.ending is Ending.STOPPED:
        why = "the turn was stopped while this call ran and it did not finish; it may have had an effect"
        return "unknown", outcomes.unknown(use.id, f"{why}; it was not retried"), {"stopped": True}
    if ran.ending is Ending.RAISED and isinstance(ran.error, ToolOutcomeUnknown):  # sent, no answer came
        return "unknown", outcomes.unknown(use.id, str(ran.error)), {}
    if ran.ending is Ending.RAISED:  # the tool's own failure is a result the model sees
        return "error", outcomes.failed(use.id, f"{type(ran.error).__name__}: {ran.error}"), {}
    try:
        text = result_text(ran.value)
    except (TypeError, ValueError) as exc:
        return "error", outcomes.failed(use.id, f"the tool's result is not JSON: {exc}"), {}
    return (
        "ok",
        outcomes.edited(use.id, text, use.input) if call.edited else ToolResultBlock(use.id, text),
        {},
    )


def _context(rt: Runtime, config: AgentConfig, turn: TurnRecord, call: Call) -> ToolContext:
    use, approval, who = call.use, call.approval, {}
    if approval is not None:
        changed = approval.edited_args is not None
        who = {
            "decision": "approve",
            "decided_by": approval.decided_by,
            "decided_via": approval.channel,
            "decided_at": approval.at,
            "comment": approval.comment,
            "edited_by": approval.decided_by if changed else None,
            "proposed_args": call.proposed if changed else None,
        }
    return ToolContext.for_call(
        turn_id=turn.turn_id,
        call_id=use.id,
        tool=use.name,
        tenant=turn.tenant,
        agent=turn.agent,
        session_id=turn.session_id,
        timeout=config.timeout_of(use.name),
        clock=rt.stores.clock,
        **who,
    )


def stop_requested(rt: Runtime, turn_id: str) -> StopReason | None:
    """The stop requested on the turn as stored now (``None``: none, or no such turn)."""
    current = rt.stores.turns.get_turn(turn_id)
    return current.stop_requested if current is not None else None


def _ran(rt: Runtime, call: CallRecord, outcome: str, result: ToolResultBlock, **notes: Any) -> Ran:
    now = rt.stores.clock.now()
    done = CallRecord(
        call.turn_id, call.tool_use_id, call.tool, call.started_at, outcome, result.to_dict(), now
    )
    event = rt.stamp("tool_outcome", toolUseId=call.tool_use_id, tool=call.tool, outcome=outcome, **notes)
    return Ran(result, done, event)


def not_run(rt: Runtime, claim: CallRecord, stop: str) -> Ran:
    """A call claimed in this process that it will not run after all (a stop came first)."""
    return _ran(rt, claim, "cancelled", outcomes.cancelled(claim.tool_use_id, stop))


OUTCOME_WRITE_ATTEMPTS = 8
"""Tries of a write that carries a call's outcome (0.05 s doubling to 2 s between them: about 7 s)."""


def record_alone(rt: Runtime, ran: list[Ran]) -> None:
    """Record outcomes on their own when the transition meant to carry them did not land.

    The turn is no longer this runner's (a stop closed it, or its lease was taken): the calls ran and
    their results are in hand, so they are recorded rather than left ``unknown``.
    """
    for done in ran:
        if done.record is None:
            continue
        record, event = done.record, done.event
        durably(lambda: rt.stores.turns.finish_call(record))  # noqa: B023 (called at once)
        if event is not None:
            rt.stores.turns.add_event(record.turn_id, event)


def durably(write: Callable[[], T]) -> T:
    """Run ``write``, retrying a transient store error with backoff.

    Used for writes that carry a call's outcome: the call has run and its result is in hand, and
    giving up would make it ``unknown`` for good (the next worker finds it started with no outcome).
    The worker holds the turn while it retries (its heartbeat renews the lease); only when the store
    stays down past the retries does the error go up, and then the outcome is ``unknown``, as for a
    process that died.
    """
    pause, waiter = 0.05, threading.Event()
    for attempt in range(1, OUTCOME_WRITE_ATTEMPTS + 1):
        try:
            return write()
        except StoreError:
            if attempt == OUTCOME_WRITE_ATTEMPTS:
                raise
            waiter.wait(pause)
            pause = min(pause * 2, 2.0)
    raise AssertionError("unreachable")


def _as_result(data: JsonDict) -> ToolResultBlock:
    block = block_from_dict(data)
    assert isinstance(block, ToolResultBlock)
    return block


def pending_notification(rt: Runtime, turn: TurnRecord, item: PendingItem) -> ApprovalEvent | QuestionEvent:
    """The ``approval`` or ``question`` notification for one pending item."""
    return notifications.for_item(turn, item, rt.public_url)
