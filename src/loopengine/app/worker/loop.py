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

from dataclasses import replace
from typing import Any

from loopengine.app import usage
from loopengine.app.outcome import TurnOutcome, load_turn, outcome_of
from loopengine.app.ports import Append, Change, Committed, ModelResponse
from loopengine.app.request.handoff import hand_on
from loopengine.app.worker import compaction
from loopengine.app.worker.batch import BatchPlan, Call, plan_batch, record_alone
from loopengine.app.worker.claims import approval_of, first_claim, landed_claim, no_time_for, run_one
from loopengine.app.worker.model_call import Abandoned, call_model
from loopengine.app.worker.pause import answer, append_results, checkpoint_id, park
from loopengine.app.worker.runner import NOTHING, Carry, Worker, finish
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.tools import args_hash
from loopengine.domain import outcomes
from loopengine.domain import turn_state as ts
from loopengine.domain.base.errors import ModelError, NotFound, StoreError, VersionConflict
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.messages import Message, ToolUseBlock
from loopengine.domain.policy import ModelRetry
from loopengine.domain.tokens.context_window import History
from loopengine.domain.turns import CallRecord, StopReason, TurnRecord, TurnStatus


def advance(
    worker: Worker, turn: TurnRecord | None = None, history: list[Message] | None = None
) -> TurnOutcome:
    """Advance the turn ``worker`` has claimed as far as it goes.

    ``turn`` / ``history``: the records as the caller just wrote them (else they are read). Each
    step hands on the record its write returned; a stop or a lost claim shows at the next write (its
    version condition fails and the step re-plans on the stored record), so no step re-reads to check.
    Past ``worker.deadline`` (the time budget) the turn stops at a step boundary and is handed to
    the resume worker (released in the same write that marks it ready), and the outcome says
    ``running``.
    """
    rt = worker.rt
    turn = turn or load_turn(rt, worker.turn_id)
    config = rt.config_of(turn)
    if history is not None and not isinstance(history, History):
        history = History(history)
    while True:
        if turn.status is not TurnStatus.RUNNING or turn.runner != worker.runner:
            return outcome_of(turn)
        if history is None:
            history = rt.stores.sessions.load_since_compaction(turn.session_key)
        try:
            step = _step(worker, config, turn, history)
        except VersionConflict:  # the session moved under us: another runner has the turn
            history, turn = None, load_turn(rt, worker.turn_id)
            continue
        if isinstance(step, TurnOutcome):
            return step
        turn = step


def _step(
    worker: Worker, config: AgentConfig, turn: TurnRecord, history: History
) -> TurnOutcome | TurnRecord:
    """One step from the record: where the turn stands, or the record to go round again with."""
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
    if usage.exhausted(rt, turn):  # the tenant's tokens for the day are spent
        return finish(worker, config, turn, StopReason.TOKEN_ALLOWANCE, _last_text(history[turn.start_seq :]))
    rounds = sum(1 for m in history[turn.start_seq :] if m.role == "assistant")
    if rounds >= config.max_iterations:
        return finish(worker, config, turn, StopReason.MAX_ITERATIONS, _last_text(history))
    if worker.deadline is not None and rt.stores.clock.now() >= worker.deadline:
        return _hand_off(worker, turn)
    try:
        with worker.heartbeat():
            prepared = compaction.prepare(worker, config, turn, history)  # measured, compacted if due
            if prepared is None:  # the compaction's write found the turn no longer ours
                return load_turn(rt, worker.turn_id)
            turn, request = prepared
            response = call_model(worker, rt.model_for(config), request)
    except ModelError as exc:
        return _model_failed(worker, config, turn, exc)
    except Abandoned as walked_away:  # nothing to undo: a model call has no side effect
        why = "time budget" if walked_away.stop is None else walked_away.stop.value
        rt.event(turn.turn_id, "model_call_abandoned", reason=why, note="its response is discarded")
        if walked_away.stop is None:
            return _hand_off(worker, turn)
        return finish(worker, config, turn, walked_away.stop, None)
    return _answered(worker, config, turn, history, response)


def _answered(
    worker: Worker, config: AgentConfig, turn: TurnRecord, history: list[Message], response: ModelResponse
) -> TurnOutcome | TurnRecord:
    """The model answered: its message is stored in the write of what it leads to.

    No tool_use: the finish. A batch: its verdicts, and then the claims of the calls to run, the
    pause, or the answer (:func:`_batch` with the message carried).
    """
    message = Message("assistant", response.content)
    event = worker.rt.stamp(
        "model_response",
        stopReason=response.stop_reason,
        toolUses=[u.name for u in message.tool_uses],
        text=message.text,
        usage=response.usage.as_json(),
    )
    carry = Carry(message=message, events=(event,), usage=response.usage)
    if not message.tool_uses:
        add = Append(turn.session_key, (message,), len(history))
        return finish(worker, config, turn, StopReason.END_TURN, message.text, add, carry)
    return _batch(worker, config, turn, history, carry)


def _model_failed(worker: Worker, config: AgentConfig, turn: TurnRecord, exc: ModelError) -> TurnOutcome:
    """A transient error waits durably and is retried by the sweep; anything else ends the turn."""
    rt = worker.rt
    failures = turn.model_failures + 1
    error = rt.stamp("model_error", error=str(exc), retryable=exc.retryable, failures=failures)
    policy = config.model_retry or ModelRetry(rt.max_model_failures, rt.model_retry_seconds)
    if not exc.retryable or failures >= policy.attempts:
        detail = {"error": str(exc), "retryable": exc.retryable, "failures": failures}
        rt.event(turn.turn_id, "model_error", for_agent=turn.agent, **detail)
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


def _hand_off(worker: Worker, turn: TurnRecord, carry: Carry = NOTHING, **why: Any) -> TurnOutcome:
    """The time budget is spent: release the turn (ready, no lease) and invoke the resume worker.

    Outcomes of calls run since the last write (``carry``) land in the same write.
    """
    rt = worker.rt
    now = rt.stores.clock.now()
    event = rt.stamp("handed_off", reason="time budget reached", **why)

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        ready = ts.hand_off(t, worker.runner, now, rt.handoff_grace)
        if ready is None:
            return None
        return Change(t.turn_id, turn=ready, events=(*carry.all_events(), event), calls=carry.calls())

    done = carry.commit(rt, turn.turn_id, decide, turn)
    if done is None or done.turn is None:
        return outcome_of(load_turn(rt, turn.turn_id))
    hand_on(rt, done.turn)
    return outcome_of(done.turn)


def _batch(
    worker: Worker, config: AgentConfig, turn: TurnRecord, history: list[Message], carry: Carry = NOTHING
) -> TurnOutcome | TurnRecord:
    """Handle a tool_use batch: ``carry.message`` (just answered), else the last message of history."""
    rt = worker.rt
    if carry.message is None and turn.checkpoint_id == checkpoint_id(turn, len(history) - 1):
        return _close_batch(worker, config, turn, history)
    uses = (carry.message or history[-1]).tool_uses
    now = rt.stores.clock.now()
    if carry.message is not None:
        carry = replace(
            carry, verdicts={u.id: config.rules.evaluate(u.name, u.input).to_dict() for u in uses}
        )
        verdicts = {**carry.verdicts, **turn.verdicts}
    else:
        turn = _record_verdicts(worker, config, turn, uses)
        verdicts = turn.verdicts
    plan = plan_batch(config, uses, verdicts, now, turn.sticky_tools)
    if carry.message is not None:
        sticky = [rt.stamp("auto_approved", toolUseId=u, reason=STICKY) for u in plan.sticky]
        carry = replace(carry, events=(*carry.events, *sticky))
    if turn.stop_requested is None and plan.denied:
        results = [outcomes.denied(u.id, plan.reasons[u.id]) for u in plan.denied]
        results += [plan.invalid.get(u.id) or outcomes.skipped(u.id) for u in uses if u not in plan.denied]
        add = answer(turn, history, results, carry)
        return finish(worker, config, turn, StopReason.DENIED, None, add, carry)
    if plan.allowed and carry.message is not None and turn.stop_requested is None:
        claimed = _claim(worker, turn, history, carry, first_claim(worker, config, turn, plan.allowed, now))
        return claimed if claimed is not None else load_turn(rt, turn.turn_id)
    return _run_batch(worker, config, turn, history, carry, plan)


STICKY = "approved for the rest of this turn"


def _claim(
    worker: Worker, turn: TurnRecord, history: list[Message], carry: Carry, claims: tuple[CallRecord, ...]
) -> TurnRecord | None:
    """Store the model's message, its verdicts and the claim of the first call to run: one write."""
    assert carry.message is not None
    add = Append(turn.session_key, (carry.message,), len(history))

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        held = carry.onto(t, worker.runner, worker.lease_until())
        if held is None:
            return None
        return Change(t.turn_id, turn=held, append=add, events=carry.all_events(), claims=claims)

    try:
        done = worker.rt.transition(turn.turn_id, decide, turn=turn)
    except StoreError:  # its every answer lost: landed if the claims are recorded (then they are ours)
        landed = landed_claim(worker.rt, turn.turn_id, worker.runner, claims) if claims else None
        if landed is None:
            raise
        done = Committed(turn=landed)
    if done is None:
        return None
    history.extend(add.messages)
    worker.claimed = {c.tool_use_id: c for c in claims}
    carry.landed()
    return done.turn


def _run_batch(
    worker: Worker,
    config: AgentConfig,
    turn: TurnRecord,
    history: list[Message],
    carry: Carry,
    plan: BatchPlan,
) -> TurnOutcome | TurnRecord:
    """Run the batch's allowed calls, then park its pending items or append its answer."""
    rt = worker.rt
    uses = (carry.message or history[-1]).tool_uses
    results = list(plan.invalid.values())
    for use in plan.allowed:
        if no_time_for(worker, config, use):
            return _hand_off(worker, turn, carry, toolUseId=use.id, timeout=config.timeout_of(use.name))
        carry = carry.plus([run_one(worker, config, turn, Call(use), first=not carry.ran)])
    results += carry.results()
    while True:
        stop = turn.stop_requested
        if stop is not None:  # nothing new starts; what already ran keeps its result
            results += [outcomes.cancelled(u.id, stop) for u in uses if u in plan.denied]
            results += [outcomes.cancelled(p.tool_use_id, stop) for p in plan.pending]
            return finish(worker, config, turn, stop, None, answer(turn, history, results, carry), carry)
        if not plan.pending:
            appended = append_results(worker, turn, history, results, carry=carry)
            return appended if appended is not None else load_turn(rt, turn.turn_id)
        parked = park(worker, config, turn, history, results, plan.pending, carry)
        if parked is not None:
            return parked
        turn = load_turn(rt, turn.turn_id)  # a stop came first: close the batch without asking
        if turn.status is not TurnStatus.RUNNING or turn.runner != worker.runner:
            record_alone(rt, list(carry.ran))
            return outcome_of(turn)


def _close_batch(
    worker: Worker, config: AgentConfig, turn: TurnRecord, history: list[Message]
) -> TurnOutcome | TurnRecord:
    """The parked batch is closed: run what people approved, then answer the whole batch at once."""
    rt = worker.rt
    assert turn.checkpoint_id is not None
    held = worker.closing
    cp = (
        held
        if held is not None and held.id == turn.checkpoint_id
        else rt.stores.checkpoints.get(turn.checkpoint_id)
    )
    if cp is None or not cp.closed:
        raise NotFound(
            f"turn {turn.turn_id} is running on checkpoint {turn.checkpoint_id}, which is not closed"
        )
    carry = NOTHING
    proposed = {u.id: u.input for u in history[-1].tool_uses}
    for item in cp.approved.values():
        use = ToolUseBlock(item.tool_use_id, item.tool, item.args)
        if no_time_for(worker, config, use):
            return _hand_off(worker, turn, carry, toolUseId=use.id, timeout=config.timeout_of(use.name))
        edited = args_hash(item.tool, item.args) != item.args_hash
        approval = approval_of(cp, item.pending_id)
        call = Call(use, edited, approval, proposed.get(item.tool_use_id))
        ran = run_one(worker, config, turn, call, not carry.ran)
        carry = carry.plus([ran])
    results = [*cp.results_so_far, *carry.results()]
    if cp.denied:
        return finish(worker, config, turn, StopReason.DENIED, None, answer(turn, history, results), carry)
    appended = append_results(worker, turn, history, results, clear_checkpoint=True, carry=carry)
    return appended if appended is not None else load_turn(rt, turn.turn_id)


def _record_verdicts(
    worker: Worker, config: AgentConfig, turn: TurnRecord, uses: list[ToolUseBlock]
) -> TurnRecord:
    """Evaluate the gate for calls without a recorded verdict and record them (first write wins)."""
    if all(u.id in turn.verdicts for u in uses):
        return turn
    fresh = {u.id: config.rules.evaluate(u.name, u.input).to_dict() for u in uses}
    recorded = worker.rt.update_turn(  # (a response stored by an older version, without verdicts)
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
