"""Durability: crashes lose nothing and re-run nothing; any process continues; config is snapshotted.

A crash is simulated by a ``BaseException`` (:class:`Crash`) raised at the point the process would
die: it is not an ``Exception``, so nothing in the library catches it, exactly like a killed process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loopengine.app import faults, views
from loopengine.app.ports import Change, Committed, ModelRequest, ModelResponse
from loopengine.app.request.resolution import Decider
from loopengine.authoring.agent import AgentConfig
from loopengine.domain.base.errors import FatalModelError, RetryableModelError
from loopengine.domain.decisions import Approval, Denial
from loopengine.domain.turns import CallRecord, StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.harness import Calls, agent
from tests.scenario import assert_protocol, checkpoint, events, history, opened, results, scenario, turn

REVIEWER = Decider("ops@example.com")
RULES = {"rules": [{"tool": "lookup", "decision": "allow"}], "default_decision": "ask"}
PAST_LEASE = 61.0  # Runtime.lease_seconds and handoff_grace are 60


class Crash(BaseException):
    """The process dies here."""


def crash_once(calls: Calls, name: str) -> Any:
    """A tool ``name`` that records its execution, then kills the process the first time."""
    state = {"crashed": False}

    def fn(args: dict[str, Any]) -> Any:
        if not state["crashed"]:
            state["crashed"] = True
            raise Crash(f"{name} died mid-call")
        return {"ok": True}

    return calls.tool(name, fn=fn)


def shop(calls: Calls, *tools: Any, **kw: Any) -> AgentConfig:
    return agent("shop", [*tools, *(calls.tool(n) for n in ("lookup", "refund"))], RULES, **kw)


# -- once, not at least once ----------------------------------------------------------------------


def test_crash_mid_call_in_the_loop_is_reported_unknown_and_never_rerun() -> None:
    calls = Calls()
    model = ScriptedModel.from_list([call(use("charge", {"x": 1}, id="c1")), say("I could not confirm.")])
    rules = {"rules": [{"tool": "charge", "decision": "allow"}], "default_decision": "ask"}
    cfg = agent("shop", [crash_once(calls, "charge")], rules)
    with scenario(cfg, model=model) as h:
        with pytest.raises(Crash):
            h.engine.send_message("shop", "charge me")
        stored = turn(h, h.notifier.events("run_start")[0]["turnId"])
        # the call was claimed before it ran; no outcome was written
        (record,) = h.rt.stores.turns.calls(stored.turn_id).values()
        assert (record.tool_use_id, record.outcome, record.result) == ("c1", None, None)
        assert stored.status is TurnStatus.RUNNING
        # within its lease nobody else takes the turn over
        assert h.engine.resume(stored.turn_id) is None

        h.clock.advance(PAST_LEASE)
        assert h.engine.sweep().recovered == 1  # the sweep finds the dead runner's turn
        out = h.engine.outcome(stored.turn_id)

        assert out.stop_reason is StopReason.END_TURN
        assert calls.count("charge") == 1  # not executed again
        msgs = assert_protocol(h, stored.session_id)
        told = results(msgs[2])["c1"]
        assert told["status"] == "unknown"
        assert "not retried" in told["reason"]
        assert msgs[2].tool_results[0].is_error
        assert model.requests[-1].messages[2] == msgs[2]  # the model saw it
        (record,) = h.rt.stores.turns.calls(stored.turn_id).values()
        assert record.outcome == "unknown"
        assert [e["outcome"] for e in events(h, stored.turn_id, "tool_outcome")] == ["unknown"]
        assert h.engine.resume(stored.turn_id) is None


def test_a_started_call_record_with_no_outcome_is_never_run() -> None:
    """Write the claim by hand (the crash happened between claim and execution)."""
    calls = Calls()
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="r1")), say("done")])
    with scenario(shop(calls), model=model, inline=False) as h:
        out = h.engine.send_message("shop", "refund")
        (item,) = out.pending
        assert h.rt.stores.turns.start_call(CallRecord(out.turn_id, "r1", "refund", h.clock.now()))

        res = h.engine.resolve(item.pending_id, Approval(), REVIEWER)

        assert res.completed
        assert calls.count("refund") == 0
        h.engine.resume(out.turn_id)
        msgs = assert_protocol(h, out.session_id)
        assert results(msgs[2])["r1"]["status"] == "unknown"
        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN


def die_at(name: str, times: int = 1) -> Any:
    """An injector that kills the process the first ``times`` times it reaches point ``name``."""
    left = {"n": times}

    def injector(point: str) -> None:
        if point == name and left["n"] > 0:
            left["n"] -= 1
            raise Crash(f"died at {name}")

    return faults.inject(injector)


def test_crash_mid_call_after_approval_is_reported_unknown_and_never_rerun() -> None:
    calls = Calls()
    model = ScriptedModel.from_list([call(use("charge", {"x": 1}, id="c1")), say("unsure")])
    with scenario(shop(calls, crash_once(calls, "charge")), model=model, inline=False) as h:
        out = h.engine.send_message("shop", "charge")
        (item,) = out.pending

        assert h.engine.resolve(item.pending_id, Approval(), REVIEWER).completed
        assert calls.count("charge") == 0  # a resolve records; the worker runs
        with pytest.raises(Crash):
            h.engine.resume(out.turn_id)  # the resume worker dies inside the tool

        # the decision is on record and a second click does not run it again
        assert h.engine.resolve(item.pending_id, Approval(), REVIEWER).already_resolved
        assert calls.count("charge") == 1
        assert turn(h, out.turn_id).status is TurnStatus.RUNNING
        # the runner may still be alive: nothing is declared unknown within its lease
        h.engine.sweep()
        assert calls.count("charge") == 1 and turn(h, out.turn_id).status is TurnStatus.RUNNING

        h.clock.advance(PAST_LEASE)
        assert h.engine.sweep().recovered == 1
        h.deliver_resumes()

        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN
        assert calls.count("charge") == 1
        msgs = assert_protocol(h, out.session_id)
        assert results(msgs[2])["c1"]["status"] == "unknown"


def test_crash_after_the_outcome_was_recorded_uses_the_recorded_result(monkeypatch: Any) -> None:
    """The tool ran and its outcome was written, but the worker died right after that write.

    The outcome rides in the write that answers the batch, so there is no moment with the outcome
    recorded and the batch unanswered: the next worker goes on from the answered batch.
    """
    calls = Calls()
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="r1")), say("refunded")])
    with scenario(shop(calls), model=model) as h:
        out = h.engine.send_message("shop", "refund")
        real = h.rt.stores.turns.commit

        def commit_then_die(change: Change) -> Committed:
            done = real(change)
            if change.calls:
                assert change.append is not None  # the batch's answer is in the same write
                raise Crash("died after recording the outcome")
            return done

        monkeypatch.setattr(h.rt.stores.turns, "commit", commit_then_die)
        with pytest.raises(Crash):
            h.engine.resolve(out.pending[0].pending_id, Approval(), REVIEWER)
        monkeypatch.undo()
        assert calls.count("refund") == 1
        assert h.rt.stores.turns.calls(out.turn_id)["r1"].outcome == "ok"

        h.clock.advance(PAST_LEASE)
        h.engine.sweep()

        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN
        assert calls.count("refund") == 1
        msgs = assert_protocol(h, out.session_id)
        assert results(msgs[2])["r1"] == {"tool": "refund", "args": {"x": 1}}  # what really happened


def test_crash_after_appending_results_goes_on_to_the_next_batch() -> None:
    calls = Calls()
    model = ScriptedModel.from_list(
        [call(use("refund", {"x": 1}, id="r1")), call(use("refund", {"x": 2}, id="r2")), say("both")]
    )
    with scenario(shop(calls), model=model) as h:
        out = h.engine.send_message("shop", "refund twice")
        with die_at("results_appended"), pytest.raises(Crash):
            h.engine.resolve(out.pending[0].pending_id, Approval(), REVIEWER)
        assert len(history(h, out.session_id)) == 3
        assert turn(h, out.turn_id).checkpoint_id is None  # cleared in the same write as the append

        h.clock.advance(PAST_LEASE)
        h.engine.sweep()

        # the next batch pauses on its own approval; the old checkpoint is not reused for it
        again = h.engine.outcome(out.turn_id)
        assert again.status is TurnStatus.PAUSED
        assert [p.tool_use_id for p in again.pending] == ["r2"]
        assert_protocol(h, out.session_id)
        h.engine.resolve(again.pending[0].pending_id, Approval(), REVIEWER)
        msgs = assert_protocol(h, out.session_id)
        assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant", "user", "assistant"]
        assert calls.log == [("refund", {"x": 1}), ("refund", {"x": 2})]
        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN


def test_crash_after_a_denial_was_recorded_still_finishes_denied() -> None:
    calls = Calls()
    model = ScriptedModel.from_list(
        [call(use("lookup", {"x": 1}, id="l1"), use("refund", {"x": 2}, id="r1")), say("should not run")]
    )
    with scenario(shop(calls), model=model) as h:
        out = h.engine.send_message("shop", "refund")
        with die_at("decided"), pytest.raises(Crash):
            h.engine.resolve(out.pending[0].pending_id, Denial(), REVIEWER)
        # the decision's own write closed the batch and finished the turn: nothing is left to recover
        assert turn(h, out.turn_id).status is TurnStatus.FINISHED
        assert h.engine.resolve(out.pending[0].pending_id, Denial(), REVIEWER).already_resolved

        h.clock.advance(PAST_LEASE)
        assert h.engine.sweep().recovered == 0

        assert turn(h, out.turn_id).stop_reason is StopReason.DENIED
        assert len(model.requests) == 1, "the model was called after a denial"
        assert calls.log == [("lookup", {"x": 1})]
        assert len(assert_protocol(h, out.session_id)) == 3


def test_crash_right_after_the_pause_still_notifies_through_the_outbox() -> None:
    calls = Calls()
    model = ScriptedModel.from_list(
        [call(use("lookup", {"x": 1}, id="l1"), use("refund", {"x": 2}, id="r1")), say("done")]
    )
    with scenario(shop(calls), model=model) as h:
        with die_at("paused"), pytest.raises(Crash):
            h.engine.send_message("shop", "refund")
        turn_id = h.notifier.events("run_start")[0]["turnId"]
        assert turn(h, turn_id).status is TurnStatus.PAUSED
        assert h.notifier.events("approval") == []  # the process died before sending it

        h.clock.advance(PAST_LEASE)
        h.engine.sweep()

        (note,) = h.notifier.events("approval")
        assert note["eventId"].startswith("evt_")
        h.clock.advance(3600)
        h.engine.sweep()
        assert len(h.notifier.events("approval")) == 1  # delivered once it was delivered
        assert h.engine.resolve(note["pendingId"], Approval(), REVIEWER).completed
        assert turn(h, turn_id).stop_reason is StopReason.END_TURN
        assert calls.log == [("lookup", {"x": 1}), ("refund", {"x": 2})]


# -- any process continues --------------------------------------------------------------------------


def test_a_second_process_resolves_and_resumes(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    script = [call(use("lookup", {"x": 1}, id="l1"), use("refund", {"x": 5}, id="r1")), say("done")]
    first_calls, second_calls = Calls(), Calls()
    first_model, second_model = ScriptedModel.from_list(script), ScriptedModel.from_list(script)

    with opened(db, shop(first_calls), model=first_model) as one:
        out = one.engine.send_message("shop", "refund")
        (item,) = out.pending
    # process one has exited
    with opened(db, shop(second_calls), model=second_model) as two:
        res = two.engine.resolve(item.pending_id, Approval(), REVIEWER)

        assert res.completed
        assert turn(two, out.turn_id).stop_reason is StopReason.END_TURN
        assert second_calls.log == [("refund", {"x": 5})]
        assert len(second_model.requests) == 1
        msgs = assert_protocol(two, out.session_id)
        assert results(msgs[2])["l1"] == {"tool": "lookup", "args": {"x": 1}}  # ran in process one
    assert first_calls.log == [("lookup", {"x": 1})]
    assert len(first_model.requests) == 1
    with opened(db, shop(Calls()), model=ScriptedModel.from_list(script)) as three:
        assert three.engine.resolve(item.pending_id, Approval(), REVIEWER).already_resolved
        assert len(history(three, out.session_id)) == 4


def test_a_resumed_turn_runs_under_the_config_it_started_with() -> None:
    calls = Calls()
    model = ScriptedModel.from_list(
        [
            call(use("refund", {"x": 1}, id="r1")),
            call(use("refund", {"x": 2}, id="r2")),
            say("old turn done"),
            call(use("refund", {"x": 3}, id="r3")),
            say("new turn done"),
        ]
    )
    v1 = agent("shop", [calls.tool("refund")], RULES, max_iterations=5)
    with scenario(v1, model=model) as h:
        out = h.engine.send_message("shop", "refund")
        v1_hash = turn(h, out.turn_id).config_hash
        # publish a new version while the turn is parked: new prompt, everything allowed
        v2 = AgentConfig(
            name="shop",
            model="other-model",
            system="prompt v2",
            tools=v1.tools,
            rules=v1.rules.from_dict({"rules": [], "default_decision": "allow"}),
        )
        h.agents.configs["shop"] = v2

        h.engine.resolve(out.pending[0].pending_id, Approval(), REVIEWER)

        resumed = model.requests[1]
        assert (resumed.system, resumed.model) == ("test", "test-model")
        again = h.engine.outcome(out.turn_id)
        assert again.status is TurnStatus.PAUSED, "the old rules still ask for the second refund"
        h.engine.resolve(again.pending[0].pending_id, Approval(), REVIEWER)
        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN
        assert turn(h, out.turn_id).config_hash == v1_hash

        # the next turn runs under the published version
        nxt = h.engine.send_message("shop", "another one", session_id=out.session_id)

        assert nxt.status is TurnStatus.FINISHED and nxt.text == "new turn done"
        assert model.requests[-1].system == "prompt v2"
        assert turn(h, nxt.turn_id).config_hash == v2.config_hash() != v1_hash
        assert calls.log == [("refund", {"x": 1}), ("refund", {"x": 2}), ("refund", {"x": 3})]
        assert_protocol(h, out.session_id)


# -- notifications, limits and model errors -------------------------------------------------------


def test_a_failing_notifier_never_loses_the_pending_item() -> None:
    calls = Calls()
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="r1")), say("done")])
    with scenario(shop(calls), model=model, fail_notify=True) as h:
        out = h.engine.send_message("shop", "refund")

        assert out.status is TurnStatus.PAUSED
        (item,) = out.pending
        stored = turn(h, out.turn_id)
        assert stored.status is TurnStatus.PAUSED
        cp = checkpoint(h, out.turn_id)
        assert list(cp.outstanding) == [item.pending_id]
        assert [c.id for c in h.rt.stores.checkpoints.list_open("")] == [cp.id]
        failed = events(h, out.turn_id, "notification_failed")
        assert {e["notification"] for e in failed} == {"run_start", "approval"}
        assert all("receiver down" in e["error"] for e in failed)

        h.engine.resolve(item.pending_id, Approval(), REVIEWER)

        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN
        assert calls.count("refund") == 1
        assert "run_finish" in {e["notification"] for e in events(h, out.turn_id, "notification_failed")}
        assert_protocol(h, out.session_id)


def test_max_iterations_stops_the_loop() -> None:
    calls = Calls()
    model = ScriptedModel.from_list([call(use("lookup", {"x": i}, id=f"l{i}")) for i in range(5)])
    with scenario(shop(calls, max_iterations=2), model=model) as h:
        out = h.engine.send_message("shop", "loop forever")

        assert out.status is TurnStatus.FINISHED
        assert out.stop_reason is StopReason.MAX_ITERATIONS
        assert calls.count("lookup") == 2
        assert len(model.requests) == 2
        msgs = assert_protocol(h, out.session_id)
        assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
        assert turn(h, out.turn_id).stop_reason is StopReason.MAX_ITERATIONS


def test_a_fatal_model_error_finishes_the_turn_with_a_valid_history() -> None:
    calls = Calls()
    error = FatalModelError("bad request")

    def respond(request: ModelRequest) -> ModelResponse:
        if sum(m.role == "assistant" for m in request.messages) == 0:
            return call(use("lookup", {"x": 1}, id="l1"))
        raise error

    with scenario(shop(calls), model=ScriptedModel(respond)) as h:
        out = h.engine.send_message("shop", "hello")

        assert out.status is TurnStatus.FINISHED
        assert out.stop_reason is StopReason.ERROR
        assert out.text is not None and str(error) in out.text
        msgs = assert_protocol(h, out.session_id)
        assert [m.role for m in msgs] == ["user", "assistant", "user"]
        (ev,) = events(h, out.turn_id, "model_error")
        assert ev["retryable"] is False
        assert h.notifier.events("run_finish")[-1]["stopReason"] == "error"
        # the session is usable again
        assert h.rt.stores.turns.session_turns(out.session_id)[-1].status is TurnStatus.FINISHED


class Flaky:
    """A model that fails with a transient error ``failures`` times (after an approval), then answers."""

    def __init__(self, failures: int) -> None:
        self.left = failures
        self.script = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="r1")), say("refunded")])

    def create(self, request: ModelRequest) -> ModelResponse:
        if any(m.role == "assistant" for m in request.messages) and self.left > 0:
            self.left -= 1
            raise RetryableModelError("529 overloaded")
        return self.script.create(request)


def test_a_transient_model_error_right_after_an_approval_waits_and_the_sweep_retries_it() -> None:
    calls = Calls()
    model = Flaky(failures=2)
    with scenario(shop(calls), model=model) as h:
        out = h.engine.send_message("shop", "refund")
        h.engine.resolve(out.pending[0].pending_id, Approval(), REVIEWER)

        waiting = turn(h, out.turn_id)
        assert (waiting.status, waiting.model_failures) == (TurnStatus.RETRYING, 1)
        # honest status: retrying, which attempt, and when the next one is due
        assert h.engine.outcome(out.turn_id).status.public() == "retrying"
        view = views.wire(views.turn_view(waiting, h.engine.outcome(out.turn_id), []))
        assert (view["status"], view["attempt"], view["retryAt"]) == ("retrying", 1, waiting.due_at)
        assert waiting.due_at == h.clock.now() + h.rt.model_retry_seconds
        [scheduled] = events(h, out.turn_id, "retry_scheduled")
        assert (scheduled["attempt"], scheduled["retryAt"]) == (1, waiting.due_at)
        assert calls.count("refund") == 1
        h.engine.sweep()  # not due yet
        assert turn(h, out.turn_id).status is TurnStatus.RETRYING

        h.clock.advance(h.rt.model_retry_seconds)
        h.engine.sweep()  # second failure: waits twice as long
        assert (turn(h, out.turn_id).status, turn(h, out.turn_id).model_failures) == (TurnStatus.RETRYING, 2)
        h.clock.advance(h.rt.model_retry_seconds)
        h.engine.sweep()
        assert turn(h, out.turn_id).status is TurnStatus.RETRYING
        h.clock.advance(h.rt.model_retry_seconds)
        h.engine.sweep()

        done = turn(h, out.turn_id)
        assert (done.status, done.stop_reason, done.text) == (
            TurnStatus.FINISHED,
            StopReason.END_TURN,
            "refunded",
        )
        assert done.model_failures == 0
        assert calls.count("refund") == 1  # the approved call ran once, before the model failed
        assert [e["failures"] for e in events(h, out.turn_id, "model_error")] == [1, 2]
        assert_protocol(h, out.session_id)


def test_a_new_message_supersedes_a_retrying_turn_instead_of_409() -> None:
    calls = Calls()
    with scenario(shop(calls), model=Flaky(failures=99)) as h:
        out = h.engine.send_message("shop", "refund")
        h.engine.resolve(out.pending[0].pending_id, Approval(), REVIEWER)
        assert turn(h, out.turn_id).status is TurnStatus.RETRYING

        again = h.engine.send_message("shop", "never mind", session_id=out.session_id)

        old = turn(h, out.turn_id)
        assert (old.status, old.stop_reason) == (TurnStatus.FINISHED, StopReason.SUPERSEDED)
        assert again.turn_id != out.turn_id
        assert calls.count("refund") == 1
        assert_protocol(h, out.session_id)


def test_a_model_that_keeps_failing_ends_the_turn_with_error_after_the_bounded_retries() -> None:
    calls = Calls()
    with scenario(shop(calls), model=Flaky(failures=99)) as h:
        out = h.engine.send_message("shop", "refund")
        h.engine.resolve(out.pending[0].pending_id, Approval(), REVIEWER)
        for _ in range(h.rt.max_model_failures * 2):
            h.clock.advance(h.rt.model_retry_seconds * 2**h.rt.max_model_failures)
            h.engine.sweep()

        done = turn(h, out.turn_id)
        assert (done.status, done.stop_reason) == (TurnStatus.FINISHED, StopReason.ERROR)
        assert len(events(h, out.turn_id, "model_error")) == h.rt.max_model_failures
        assert_protocol(h, out.session_id)


def test_a_notifier_that_cannot_even_be_built_never_loses_the_pause(tmp_path: Path) -> None:
    from loopengine.domain.base.errors import ConfigError
    from loopengine.models.scripted import ScriptedModel, call, use
    from tests.harness import Calls, agent, make_harness

    calls = Calls()
    cfg = agent("broken-notifier", [calls.tool("refund")], {"default_decision": "ask"})
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="t1"))])
    h = make_harness(tmp_path / "n.db", cfg, model=model)

    def broken(_config: object) -> None:
        raise ConfigError("notifier email: LOOPENGINE_MAGIC_LINK_SECRET is not set")

    h.rt.notifier_for = broken
    try:
        out = h.engine.send_message("broken-notifier", "go")
        assert out.pending and out.status.value == "paused"
        failed = [e for e in h.rt.stores.turns.events(out.turn_id) if e["type"] == "notification_failed"]
        assert {e["notification"] for e in failed} == {"run_start", "approval"}
        assert "MAGIC_LINK_SECRET" in failed[0]["error"]
    finally:
        h.rt.stores.close()


def test_an_agents_model_retry_setting_sets_the_attempts_and_the_longest_wait() -> None:
    from loopengine.domain.policy import ModelRetry

    calls = Calls()
    cfg = shop(calls, model_retry=ModelRetry(attempts=3, first_wait=10.0, max_wait=15.0))
    with scenario(cfg, model=Flaky(failures=99)) as h:
        out = h.engine.send_message("shop", "refund")
        h.engine.resolve(out.pending[0].pending_id, Approval(), REVIEWER)
        first = turn(h, out.turn_id)
        assert first.due_at == h.clock.now() + 10.0  # first_wait, not the deployment's 30 s
        h.clock.advance(10.0)
        h.engine.sweep()
        assert turn(h, out.turn_id).due_at == h.clock.now() + 15.0  # 20 s capped at max_wait
        h.clock.advance(15.0)
        h.engine.sweep()
        done = turn(h, out.turn_id)
        assert (done.status, done.stop_reason) == (TurnStatus.FINISHED, StopReason.ERROR)
        assert len(events(h, out.turn_id, "model_error")) == 3
