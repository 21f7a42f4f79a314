"""The turn loop: a worker advances a turn it has claimed, from its durable record.

The loop is a reader of the record, not the holder of state. Each pass looks at the last message
of the session history and does the next step, writing it down before the step after:

    last message is the user's      -> call the model, append its response
    assistant, no tool_use           -> finish: end_turn
    assistant with tool_use blocks   -> bucket the batch (verdicts recorded once), run allowed calls
                                        (each claimed before it runs, outcome recorded after),
                                        park pending ones in a TurnCheckpoint, or append the
                                        complete tool_result message and go round again
    ... whose checkpoint is closed   -> run the calls people approved (claimed the same way),
                                        append the batch's one tool_result message

Every state change is one atomic write (:meth:`Runtime.transition`) carrying its audit events and
notifications; the worker holds the turn through a lease (``runner``) renewed by a heartbeat while
a step runs, and stops as soon as it finds the turn is no longer its own. Because every step
starts from the record, any process can continue any turn: a crash or a redeploy costs nothing,
and a call found started with no outcome is reported ``unknown``, not rerun.
"""

from __future__ import annotations

from typing import Any

from loopengine.app import faults
from loopengine.app.batch import plan_batch, run_call
from loopengine.app.model_call import Abandoned, call_model
from loopengine.app.pause import answer, append_results, checkpoint_id, park
from loopengine.app.ports import Append, Change, ModelRequest, ModelResponse
from loopengine.app.runtime import Runtime
from loopengine.app.worker import TurnOutcome, Worker, finish, hand_on, load_turn, outcome_of
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.tools import args_hash
from loopengine.domain import outcomes
from loopengine.domain import turn_state as ts
from loopengine.domain.checkpoint import TurnCheckpoint, decisions_for
from loopengine.domain.decisions import Approve
from loopengine.domain.errors import ModelError, NotFound, VersionConflict
from loopengine.domain.jsontypes import JsonDict
from loopengine.domain.messages import Message, ToolResultBlock, ToolUseBlock
from loopengine.domain.policy import ModelRetry
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus

_RECORD_MARGIN = 2.0
"""Seconds a tool call needs past its timeout (the runner's grace, the outcome's write)."""


def advance(worker: Worker) -> TurnOutcome:
    """Advance the turn ``worker`` has claimed as far as it goes.

    Past ``worker.deadline`` (the time budget) the turn stops at a step boundary and is handed to
    the resume worker (released in the same write that marks it ready), and the outcome says
    ``running``.
    """
    rt = worker.rt
    turn = load_turn(rt, worker.turn_id)
    config = rt.config_of(turn)
    history: list[Message] | None = None  # read once; our own appends extend it (CAS-guarded)
    while True:
        turn = load_turn(rt, worker.turn_id)  # each pass: the stop flag and the claim are checked here
        if turn.status is not TurnStatus.RUNNING or turn.runner != worker.runner:
            return outcome_of(turn)
        if history is None:
            history = rt.stores.sessions.load(turn.session_id)
        try:
            stopped = _step(worker, config, turn, history)
        except VersionConflict:  # the session moved under us: another runner has the turn
            history = None
            continue
        if stopped is not None:
            return stopped


def _step(
    worker: Worker, config: AgentConfig, turn: TurnRecord, history: list[Message]
) -> TurnOutcome | None:
    """One step from the record; ``None`` means go round again."""
    rt = worker.rt
    if len(history) <= turn.start_seq:
        return finish(
            worker, config, turn, StopReason.ERROR, "the turn's message is missing from its session"
        )
    last = history[-1]
    if last.role == "assistant":
        if not last.tool_uses:
            return finish(worker, config, turn, StopReason.END_TURN, last.text)
        return _batch(worker, config, turn, history)
    if turn.stop_requested is not None:
        return finish(worker, config, turn, turn.stop_requested, None)
    rounds = sum(1 for m in history[turn.start_seq :] if m.role == "assistant")
    if rounds >= config.max_iterations:
        return finish(worker, config, turn, StopReason.MAX_ITERATIONS, _last_text(history))
    if worker.deadline is not None and rt.stores.clock.now() >= worker.deadline:
        return _hand_off(worker, turn)
    request = ModelRequest(
        config.model, config.system, config.max_tokens, merged(history), config.tool_specs()
    )
    try:
        with worker.heartbeat():
            response = call_model(worker, rt.model_for(config), request)
    except ModelError as exc:
        return _model_failed(worker, config, turn, exc)
    except Abandoned as walked_away:  # nothing to undo: a model call has no side effect
        why = "time budget" if walked_away.stop is None else walked_away.stop.value
        rt.event(turn.turn_id, "model_call_abandoned", reason=why, note="its response is discarded")
        if walked_away.stop is None:
            return _hand_off(worker, turn)
        return finish(worker, config, turn, walked_away.stop, None)
    _record_response(worker, turn, history, response)
    return None


def _record_response(
    worker: Worker, turn: TurnRecord, history: list[Message], response: ModelResponse
) -> None:
    """Append the model's message, reset its failure count and renew the lease: one write."""
    rt = worker.rt
    message = Message("assistant", response.content)
    event = rt.stamp(
        "model_response",
        stopReason=response.stop_reason,
        toolUses=[u.name for u in message.tool_uses],
        text=message.text,
    )
    add = Append(turn.session_id, (message,), len(history))

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        answered = ts.model_answered(t, worker.runner, worker.lease_until())
        return None if answered is None else Change(t.turn_id, turn=answered, append=add, events=(event,))

    if rt.transition(turn.turn_id, decide, turn=turn) is not None:
        history.append(message)
        faults.point("model_recorded")


def _model_failed(worker: Worker, config: AgentConfig, turn: TurnRecord, exc: ModelError) -> TurnOutcome:
    """A transient error waits durably and is retried by the sweep; anything else ends the turn."""
    rt = worker.rt
    failures = turn.model_failures + 1
    error = rt.stamp("model_error", error=str(exc), retryable=exc.retryable, failures=failures)
    policy = config.model_retry or ModelRetry(rt.max_model_failures, rt.model_retry_seconds)
    if not exc.retryable or failures >= policy.attempts:
        rt.event(turn.turn_id, "model_error", error=str(exc), retryable=exc.retryable, failures=failures)
        return finish(worker, config, turn, StopReason.ERROR, f"model call failed: {exc}")
    at = rt.stores.clock.now() + policy.wait(failures)
    waiting = rt.stamp("retry_scheduled", retryAt=at, attempt=failures)

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        later = ts.retry_later(t, worker.runner, at)
        return None if later is None else Change(t.turn_id, turn=later, events=(error, waiting))

    done = rt.transition(turn.turn_id, decide, turn=turn)
    return outcome_of(
        done.turn if done is not None and done.turn is not None else load_turn(rt, turn.turn_id)
    )


def _hand_off(worker: Worker, turn: TurnRecord, **why: Any) -> TurnOutcome:
    """The time budget is spent: release the turn (ready, no lease) and invoke the resume worker."""
    rt = worker.rt
    now = rt.stores.clock.now()
    event = rt.stamp("handed_off", reason="time budget reached", **why)

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        ready = ts.hand_off(t, worker.runner, now, rt.handoff_grace)
        return None if ready is None else Change(t.turn_id, turn=ready, events=(event,))

    done = rt.transition(turn.turn_id, decide, turn=turn)
    if done is None or done.turn is None:
        return outcome_of(load_turn(rt, turn.turn_id))
    hand_on(rt, done.turn)
    return outcome_of(done.turn)


def _batch(
    worker: Worker, config: AgentConfig, turn: TurnRecord, history: list[Message]
) -> TurnOutcome | None:
    """Handle the tool_use batch at the end of history; ``None`` means go round again."""
    rt = worker.rt
    seq = len(history) - 1
    if turn.checkpoint_id == checkpoint_id(turn, seq):
        return _close_batch(worker, config, turn, history)
    uses = history[-1].tool_uses
    turn = _record_verdicts(worker, config, turn, uses)
    plan = plan_batch(config, uses, turn.verdicts, rt.stores.clock.now(), turn.sticky_tools)
    for use_id in plan.sticky:
        rt.event(turn.turn_id, "auto_approved", toolUseId=use_id, reason="approved for the rest of this turn")
    if turn.stop_requested is None and plan.denied:
        results = [outcomes.denied(u.id, plan.reasons[u.id]) for u in plan.denied]
        results += [plan.invalid.get(u.id) or outcomes.skipped(u.id) for u in uses if u not in plan.denied]
        return finish(worker, config, turn, StopReason.DENIED, None, answer(turn, history, results))
    results = list(plan.invalid.values())
    for use in plan.allowed:
        if _no_time_for(worker, config, use):
            return _hand_off(worker, turn, toolUseId=use.id, timeout=config.timeout_of(use.name))
        results.append(_run(worker, config, turn, use))
    stop = _stop_requested(rt, turn.turn_id)
    if stop is not None:  # nothing new starts; what already ran keeps its result
        results += [outcomes.cancelled(u.id, stop) for u in uses if u in plan.denied]
        results += [outcomes.cancelled(p.tool_use_id, stop) for p in plan.pending]
        return finish(worker, config, turn, stop, None, answer(turn, history, results))
    if not plan.pending:
        append_results(worker, turn, history, results)
        return None
    return park(worker, config, turn, seq, results, plan.pending)


def _run(
    worker: Worker,
    config: AgentConfig,
    turn: TurnRecord,
    use: ToolUseBlock,
    edited: bool = False,
    approval: Approve | None = None,
    proposed: JsonDict | None = None,
) -> ToolResultBlock:
    """Run one call unless a stop was requested first (checked before every tool call)."""
    stop = _stop_requested(worker.rt, worker.turn_id)
    if stop is not None and use.id not in worker.rt.stores.turns.calls(worker.turn_id):
        return outcomes.cancelled(use.id, stop)
    with worker.heartbeat():  # (a call already started is never re-run: run_call reports it)
        return run_call(worker.rt, config, turn, use, edited, approval, proposed)


def _no_time_for(worker: Worker, config: AgentConfig, use: ToolUseBlock) -> bool:
    """The call's timeout does not fit the time this invocation has left: hand the turn on first.

    The limit is the invocation's end (``hard_limit``; else the time budget), less a margin to record
    the outcome: running the call anyway could end the invocation mid-call and make it ``unknown``.
    A call that has started is answered from its record; a call handed on once for this reason runs
    on the next worker whatever its time (a second hand-off could go on for ever).
    """
    rt = worker.rt
    limit = worker.hard_limit if worker.hard_limit is not None else worker.deadline
    needed = config.timeout_of(use.name) + _RECORD_MARGIN
    if limit is None or rt.stores.clock.now() + needed <= limit:
        return False
    if use.id in rt.stores.turns.calls(worker.turn_id):
        return False
    handed = (e for e in rt.stores.turns.events(worker.turn_id) if e["type"] == "handed_off")
    return all(e.get("toolUseId") != use.id for e in handed)


def _stop_requested(rt: Runtime, turn_id: str) -> StopReason | None:
    current = rt.stores.turns.get_turn(turn_id)
    return current.stop_requested if current is not None else None


def _close_batch(
    worker: Worker, config: AgentConfig, turn: TurnRecord, history: list[Message]
) -> TurnOutcome | None:
    """The parked batch is closed: run what people approved, then answer the whole batch at once."""
    rt = worker.rt
    assert turn.checkpoint_id is not None
    cp = rt.stores.checkpoints.get(turn.checkpoint_id)
    if cp is None or not cp.closed:
        raise NotFound(
            f"turn {turn.turn_id} is running on checkpoint {turn.checkpoint_id}, which is not closed"
        )
    results = list(cp.results_so_far)
    proposed = {u.id: u.input for u in history[-1].tool_uses}
    for item in cp.approved.values():
        use = ToolUseBlock(item.tool_use_id, item.tool, item.args)
        if _no_time_for(worker, config, use):
            return _hand_off(worker, turn, toolUseId=use.id, timeout=config.timeout_of(use.name))
        edited = args_hash(item.tool, item.args) != item.args_hash
        approval = _approval(cp, item.pending_id)
        results.append(_run(worker, config, turn, use, edited, approval, proposed.get(item.tool_use_id)))
    if cp.denied:
        return finish(worker, config, turn, StopReason.DENIED, None, answer(turn, history, results))
    append_results(worker, turn, history, results, clear_checkpoint=True)
    return None


def _approval(cp: TurnCheckpoint, pending_id: str) -> Approve | None:
    """The person's approval of one item (who, when, through what, with what note or edit)."""
    return next((d for d in reversed(decisions_for(cp, pending_id)) if isinstance(d, Approve)), None)


def _record_verdicts(
    worker: Worker, config: AgentConfig, turn: TurnRecord, uses: list[ToolUseBlock]
) -> TurnRecord:
    """Evaluate the gate for calls without a recorded verdict and record them (first write wins)."""
    if all(u.id in turn.verdicts for u in uses):
        return turn
    fresh = {u.id: config.rules.evaluate(u.name, u.input).to_dict() for u in uses}
    recorded = worker.rt.update_turn(
        turn.turn_id, lambda t: ts.record_verdicts(t, worker.runner, fresh), turn
    )
    return recorded or load_turn(worker.rt, turn.turn_id)


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
