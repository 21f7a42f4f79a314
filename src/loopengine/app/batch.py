"""One model response's tool calls: bucket them, run the allowed ones exactly once.

Bucketing looks at every tool_use before anything runs, so the result does not depend on the
order the model listed them in: allowed calls run, denied ones get a synthesized result, the rest
(``ask`` verdicts and ``system_ask_user`` questions) wait for a human. A synchronous denial cancels
the whole batch: nothing in it runs, siblings are reported ``skipped``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopengine.app import faults
from loopengine.app.runtime import Runtime
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.tools import ASK_USER, ASK_USER_SPEC, args_hash, result_text
from loopengine.domain import notifications, outcomes
from loopengine.domain.checkpoint import PendingItem
from loopengine.domain.errors import InvalidInput
from loopengine.domain.gate import Decision, Verdict
from loopengine.domain.ids import new_id
from loopengine.domain.messages import ToolResultBlock, ToolUseBlock, block_from_dict
from loopengine.domain.notifications import ApprovalEvent, QuestionEvent
from loopengine.domain.policy import Expiry
from loopengine.domain.schema import validate_args
from loopengine.domain.turns import CallRecord, TurnRecord

JsonDict = dict[str, Any]


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


def run_call(
    rt: Runtime,
    config: AgentConfig,
    turn_id: str,
    use: ToolUseBlock,
    edited: bool = False,
) -> ToolResultBlock:
    """Run one call at most once: claim it, execute, record the outcome, return the result.

    A call already finished returns its recorded result; a call already started with no
    outcome (the process died mid-call) is never re-run: its result is ``unknown``.
    """
    turns, clock = rt.stores.turns, rt.stores.clock
    record = CallRecord(turn_id, use.id, use.name, clock.now())
    if not turns.start_call(record):
        existing = turns.calls(turn_id)[use.id]
        if existing.result is not None:
            return _as_result(existing.result)
        result = outcomes.unknown(use.id, outcomes.CRASHED)
        _record(rt, existing, "unknown", result)
        return result
    faults.point("tool_claimed")
    tool = config.tool(use.name)
    outcome = "ok"
    if tool is None:
        outcome, result = "error", outcomes.failed(use.id, f"unknown tool {use.name!r}")
    else:
        try:
            validate_args(tool.input_schema, use.input, "arguments")
            text = result_text(tool.execute(use.input))
            result = outcomes.edited(use.id, text, use.input) if edited else ToolResultBlock(use.id, text)
        except InvalidInput as exc:
            outcome, result = "error", outcomes.failed(use.id, str(exc))
        except Exception as exc:  # the tool's own failure is a result the model sees
            outcome, result = "error", outcomes.failed(use.id, f"{type(exc).__name__}: {exc}")
    faults.point("tool_returned")
    _record(rt, record, outcome, result)
    return result


def _record(rt: Runtime, call: CallRecord, outcome: str, result: ToolResultBlock) -> None:
    now = rt.stores.clock.now()
    done = CallRecord(
        call.turn_id, call.tool_use_id, call.tool, call.started_at, outcome, result.to_dict(), now
    )
    rt.stores.turns.finish_call(done)
    rt.event(call.turn_id, "tool_outcome", toolUseId=call.tool_use_id, tool=call.tool, outcome=outcome)


def _as_result(data: JsonDict) -> ToolResultBlock:
    block = block_from_dict(data)
    assert isinstance(block, ToolResultBlock)
    return block


def pending_notification(rt: Runtime, turn: TurnRecord, item: PendingItem) -> ApprovalEvent | QuestionEvent:
    """The ``approval`` or ``question`` notification for one pending item."""
    return notifications.for_item(turn, item, rt.public_url)
