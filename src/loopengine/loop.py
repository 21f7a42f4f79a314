"""The turn loop: advance a turn from its durable record until it pauses or finishes.

The loop is a reader of the record, not the holder of state. Each pass looks at the last message
of the session history and does the next step, writing it down before the step after:

    last message is the user's      -> call the model, append its response
    assistant, no tool_use           -> finish: end_turn
    assistant with tool_use blocks   -> bucket the batch (verdicts recorded once), run allowed calls
                                        (each claimed before it runs, outcome recorded after),
                                        park pending ones in a TurnCheckpoint, or append the
                                        complete tool_result message and go round again

Because every step starts from the record, any process can continue any turn: a crash or a
redeploy costs nothing, and a call found started with no outcome is reported ``unknown``, not rerun.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

from loopengine import outcomes
from loopengine.agent import AgentConfig
from loopengine.batch import pending_notification, plan_batch, run_call
from loopengine.cas import modify
from loopengine.checkpoint import PendingItem, TurnCheckpoint, abandon
from loopengine.errors import AlreadyExists, ModelError, NotFound
from loopengine.gate import Decision
from loopengine.messages import Message, ToolResultBlock, ToolUseBlock
from loopengine.ports import ModelRequest
from loopengine.runtime import Runtime
from loopengine.turns import StopReason, TurnRecord, TurnStatus

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class TurnOutcome:
    """Where a turn stands after the loop stopped advancing it."""

    turn_id: str
    session_id: str
    status: TurnStatus
    stop_reason: StopReason | None
    text: str | None = None
    pending: list[PendingItem] = field(default_factory=list)


def outcome_of(turn: TurnRecord, pending: list[PendingItem] | None = None) -> TurnOutcome:
    """Describe a turn record."""
    return TurnOutcome(turn.turn_id, turn.session_id, turn.status, turn.stop_reason, turn.text, pending or [])


def advance(rt: Runtime, turn_id: str, deadline: float | None = None) -> TurnOutcome:
    """Advance ``turn_id`` (which the caller has claimed: status running) as far as it goes.

    ``deadline`` (clock seconds) is the time budget: past it, the turn stops at a round boundary
    and is handed to the resume worker, and the outcome says ``running``.
    """
    sessions, clock = rt.stores.sessions, rt.stores.clock
    turn = _load(rt, turn_id)
    config = rt.config_of(turn)
    model = rt.model_for(config)
    history: list[Message] | None = None  # read once; our own appends extend it (CAS-guarded)
    while True:
        turn = _load(rt, turn_id)  # each pass: the stop flag and status are checked here
        if turn.status is not TurnStatus.RUNNING:
            return outcome_of(turn)
        if history is None:
            history = sessions.load(turn.session_id)
        last = history[-1]
        if last.role == "assistant":
            if not last.tool_uses:
                return finish(rt, config, turn, StopReason.END_TURN, last.text)
            stopped = _batch(rt, config, turn, history)
            if stopped is not None:
                return stopped
            continue
        if _answers_a_denied_batch(rt, turn, history):
            return finish(rt, config, turn, StopReason.DENIED, None)
        if turn.stop_requested is not None:
            return finish(rt, config, turn, turn.stop_requested, None)
        rounds = sum(1 for m in history[turn.start_seq :] if m.role == "assistant")
        if rounds >= config.max_iterations:
            return finish(rt, config, turn, StopReason.MAX_ITERATIONS, _last_text(history))
        if deadline is not None and clock.now() >= deadline:
            rt.event(turn_id, "handed_off", reason="time budget reached")
            rt.invoker.invoke(turn_id, turn.code_version)
            return outcome_of(turn)
        request = ModelRequest(
            config.model, config.system, config.max_tokens, merged(history), config.tool_specs()
        )
        try:
            response = model.create(request)
        except ModelError as exc:
            rt.event(turn_id, "model_error", error=str(exc), retryable=exc.retryable)
            return finish(rt, config, turn, StopReason.ERROR, f"model call failed: {exc}")
        message = Message("assistant", response.content)
        sessions.append(turn.session_id, [message], expected_len=len(history))
        history.append(message)
        rt.event(
            turn_id,
            "model_response",
            stopReason=response.stop_reason,
            toolUses=[u.name for u in message.tool_uses],
        )
        rt.update_turn(turn_id, functools.partial(_renew, until=clock.now() + rt.lease_seconds), turn)


def _renew(turn: TurnRecord, until: float) -> TurnRecord:
    return replace(turn, lease_until=until)


def _batch(rt: Runtime, config: AgentConfig, turn: TurnRecord, history: list[Message]) -> TurnOutcome | None:
    """Handle the tool_use batch at the end of history; ``None`` means go round again."""
    if turn.checkpoint_id == checkpoint_id(turn, len(history) - 1):
        return _close_batch(rt, config, turn, history)
    # (a checkpoint_id of an earlier batch is left over from a crash between appending that
    # batch's results and clearing it: that batch is answered; this one is new)
    uses = history[-1].tool_uses
    turn = _record_verdicts(rt, config, turn, uses)
    plan = plan_batch(config, uses, turn.verdicts, rt.stores.clock.now(), turn.sticky_tools)
    for use_id in plan.sticky:
        rt.event(turn.turn_id, "auto_approved", toolUseId=use_id, reason="approved for the rest of this turn")
    if turn.stop_requested is None and plan.denied:
        results = [outcomes.denied(u.id, plan.reasons[u.id]) for u in plan.denied]
        results += [plan.invalid.get(u.id) or outcomes.skipped(u.id) for u in uses if u not in plan.denied]
        _append_results(rt, turn, history, results)
        return finish(rt, config, turn, StopReason.DENIED, None)
    results = list(plan.invalid.values())
    for use in plan.allowed:
        stop = _stop_requested(rt, turn.turn_id)
        results.append(outcomes.cancelled(use.id, stop) if stop else run_call(rt, config, turn.turn_id, use))
    stop = _stop_requested(rt, turn.turn_id)
    if stop is not None:  # nothing new starts; what already ran keeps its result
        results += [outcomes.cancelled(u.id, stop) for u in uses if u in plan.denied]
        results += [outcomes.cancelled(p.tool_use_id, stop) for p in plan.pending]
        _append_results(rt, turn, history, results)
        return None  # the next pass sees stop_requested and finishes
    if not plan.pending:
        _append_results(rt, turn, history, results)
        return None
    return _park(rt, config, turn, len(history) - 1, results, plan.pending)


def _stop_requested(rt: Runtime, turn_id: str) -> StopReason | None:
    """Re-read the turn's stop flag (checked before every tool call)."""
    current = rt.stores.turns.get_turn(turn_id)
    return current.stop_requested if current is not None else None


def _close_batch(
    rt: Runtime, config: AgentConfig, turn: TurnRecord, history: list[Message]
) -> TurnOutcome | None:
    assert turn.checkpoint_id is not None
    cp = rt.stores.checkpoints.get(turn.checkpoint_id)
    if cp is None or not cp.complete:
        return outcome_of(turn)
    _append_results(rt, turn, history, list(cp.results_so_far))
    if cp.denied:  # finish clears checkpoint_id in the same write
        return finish(rt, config, turn, StopReason.DENIED, None)
    rt.update_turn(turn.turn_id, lambda t: replace(t, checkpoint_id=None), turn)
    return None


def _answers_a_denied_batch(rt: Runtime, turn: TurnRecord, history: list[Message]) -> bool:
    """True when the last message answers a batch that was denied (by a rule or a human).

    The loop appends a denied batch's results and then finishes the turn; a crash between those
    two writes leaves a running turn whose next step would call the model. This restores the stop.
    """
    seq = len(history) - 2
    if seq < turn.start_seq or not history[seq].tool_uses:
        return False
    recorded = [turn.verdicts.get(u.id) for u in history[seq].tool_uses]
    if any(v is not None and v.get("decision") == Decision.DENY.value for v in recorded):
        return True
    if turn.checkpoint_id != checkpoint_id(turn, seq):
        return False
    cp = rt.stores.checkpoints.get(turn.checkpoint_id)
    return cp is not None and cp.denied


def checkpoint_id(turn: TurnRecord, seq: int) -> str:
    """The id of the checkpoint of the batch in history message ``seq`` (one per batch)."""
    return f"cp_{turn.turn_id.removeprefix('trn_')}_{seq}"


def _record_verdicts(
    rt: Runtime, config: AgentConfig, turn: TurnRecord, uses: list[ToolUseBlock]
) -> TurnRecord:
    """Evaluate the gate for calls without a recorded verdict and record them (first write wins)."""
    if all(u.id in turn.verdicts for u in uses):
        return turn
    fresh = {u.id: config.rules.evaluate(u.name, u.input).to_dict() for u in uses}

    def record(t: TurnRecord) -> TurnRecord | None:
        missing = {k: v for k, v in fresh.items() if k not in t.verdicts}
        return replace(t, verdicts={**t.verdicts, **missing}) if missing else None

    return rt.update_turn(turn.turn_id, record, turn) or _load(rt, turn.turn_id)


def _park(
    rt: Runtime,
    config: AgentConfig,
    turn: TurnRecord,
    seq: int,
    results: list[ToolResultBlock],
    pending: list[PendingItem],
) -> TurnOutcome | None:
    """Write the checkpoint and its pointers, mark the turn paused, notify.

    ``None`` (go round again) when a previous run of this step wrote the checkpoint and died
    before marking the turn paused, and people have since decided every item of it.
    """
    cp = TurnCheckpoint(
        id=checkpoint_id(turn, seq),
        turn_id=turn.turn_id,
        session_id=turn.session_id,
        agent=turn.agent,
        tenant=turn.tenant,
        results_so_far=tuple(results),
        outstanding={p.pending_id: p for p in pending},
        created_at=rt.stores.clock.now(),
    )
    try:
        rt.stores.checkpoints.create(cp)
    except AlreadyExists:  # a previous run of this step got this far; use what it wrote
        stored = rt.stores.checkpoints.get(cp.id)
        assert stored is not None
        cp = stored
        if cp.complete:
            rt.update_turn(turn.turn_id, lambda t: replace(t, checkpoint_id=cp.id))
            return None
    stop = (
        StopReason.PENDING_QUESTION
        if all(p.kind == "question" for p in pending)
        else StopReason.PENDING_APPROVAL
    )

    def pause(t: TurnRecord) -> TurnRecord | None:
        if t.stop_requested is not None:
            return None
        return replace(t, status=TurnStatus.PAUSED, stop_reason=stop, checkpoint_id=cp.id)

    paused = rt.update_turn(turn.turn_id, pause, turn)
    if paused is None:  # a cancel or a new message arrived first: nobody is asked
        why = "the turn was stopped before anyone was asked"
        now = rt.stores.clock.now()
        modify(rt, cp.id, lambda c: None if c.closed else abandon(c, why, {"decidedBy": "stop"}, now))
        rt.update_turn(turn.turn_id, lambda t: replace(t, checkpoint_id=cp.id))
        return None
    turn = paused
    items = list(cp.outstanding.values())
    rt.event(turn.turn_id, "paused", stopReason=stop.value, pendingIds=[p.pending_id for p in items])
    for item in items:
        event, payload = pending_notification(rt, turn, item)
        rt.notify(config, turn.turn_id, event, payload)
    return outcome_of(turn, items)


def _append_results(
    rt: Runtime, turn: TurnRecord, history: list[Message], results: list[ToolResultBlock]
) -> None:
    """Append the one user message answering every tool_use of the batch, in tool_use order."""
    order = {u.id: i for i, u in enumerate(history[-1].tool_uses)}
    ordered = sorted(results, key=lambda r: order.get(r.tool_use_id, len(order)))
    message = Message("user", tuple(ordered))
    rt.stores.sessions.append(turn.session_id, [message], expected_len=len(history))
    history.append(message)


def finish(
    rt: Runtime, config: AgentConfig, turn: TurnRecord, stop: StopReason, text: str | None
) -> TurnOutcome:
    """Mark the turn finished, record it and fire ``run_finish``."""
    done = rt.update_turn(
        turn.turn_id,
        lambda t: replace(t, status=TurnStatus.FINISHED, stop_reason=stop, text=text, checkpoint_id=None),
        turn,
    )
    assert done is not None
    turn = done
    rt.event(turn.turn_id, "finished", stopReason=stop.value)
    payload = {
        "turnId": turn.turn_id,
        "sessionId": turn.session_id,
        "agent": turn.agent,
        "tenant": turn.tenant,
        "stopReason": stop.value,
        "text": text,
        "trigger": turn.trigger,
    }
    rt.notify(config, turn.turn_id, "run_finish", payload)
    waiting = [t for t in rt.stores.turns.session_turns(turn.session_id) if t.status is TurnStatus.QUEUED]
    if waiting:  # the session is free: the next queued message starts its turn
        rt.invoker.invoke(waiting[0].turn_id, waiting[0].code_version)
    return outcome_of(turn)


def _load(rt: Runtime, turn_id: str) -> TurnRecord:
    turn = rt.stores.turns.get_turn(turn_id)
    if turn is None:
        raise NotFound(f"no turn {turn_id!r}")
    return turn


def merged(history: list[Message]) -> list[Message]:
    """History for the model: consecutive user messages joined into one (results, then text).

    A new message after a turn that ended on tool results (denied, superseded, cancelled) follows a
    user message; the stored record keeps both, the request joins them as the Messages API does.
    """
    out: list[Message] = []
    for msg in history:
        if out and msg.role == "user" and out[-1].role == "user":
            out[-1] = Message("user", (*out[-1].content, *msg.content))
        else:
            out.append(msg)
    return out


def _last_text(history: list[Message]) -> str | None:
    for msg in reversed(history):
        if msg.role == "assistant" and msg.text:
            return msg.text
    return None
