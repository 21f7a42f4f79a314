"""Durability: crashes lose nothing and re-run nothing; any process continues; config is snapshotted.

A crash is simulated by a ``BaseException`` (:class:`Crash`) raised at the point the process would
die: it is not an ``Exception``, so nothing in the library catches it, exactly like a killed process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loopengine.agent import AgentConfig
from loopengine.errors import FatalModelError, RetryableModelError
from loopengine.models.scripted import ScriptedModel, call, say, use
from loopengine.ports import ModelRequest, ModelResponse
from loopengine.resolution import Decider
from loopengine.turns import CallRecord, StopReason, TurnRecord, TurnStatus
from tests.harness import Calls, agent
from tests.scenario import assert_protocol, checkpoint, events, history, opened, results, scenario, turn

REVIEWER = Decider("ops@example.com")
RULES = {"rules": [{"tool": "lookup", "decision": "allow"}], "default_decision": "ask"}
PAST_LEASE = 901.0  # Runtime.lease_seconds and stale_call_seconds are 900


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
        out = h.engine.resume(stored.turn_id)

        assert out is not None and out.stop_reason is StopReason.END_TURN
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

        res = h.engine.resolve(item.pending_id, "approve", REVIEWER)

        assert res.completed
        assert calls.count("refund") == 0
        h.engine.resume(out.turn_id)
        msgs = assert_protocol(h, out.session_id)
        assert results(msgs[2])["r1"]["status"] == "unknown"
        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN


def test_crash_mid_call_after_approval_is_reported_unknown_and_never_rerun() -> None:
    calls = Calls()
    model = ScriptedModel.from_list([call(use("charge", {"x": 1}, id="c1")), say("unsure")])
    with scenario(shop(calls, crash_once(calls, "charge")), model=model) as h:
        out = h.engine.send_message("shop", "charge")
        (item,) = out.pending

        with pytest.raises(Crash):
            h.engine.resolve(item.pending_id, "approve", REVIEWER)

        # the decision is on record and a second click does not run it again
        assert h.engine.resolve(item.pending_id, "approve", REVIEWER).already_resolved
        assert calls.count("charge") == 1
        cp = checkpoint(h, out.turn_id)
        assert list(cp.inflight) == [item.pending_id] and cp.closed and not cp.complete
        # the runner may still be alive: nothing is declared unknown before the stale cutoff
        assert h.engine.resume(out.turn_id) is None
        assert turn(h, out.turn_id).status is TurnStatus.PAUSED

        h.clock.advance(PAST_LEASE)
        resumed = h.engine.resume(out.turn_id)

        assert resumed is not None and resumed.stop_reason is StopReason.END_TURN
        assert calls.count("charge") == 1
        msgs = assert_protocol(h, out.session_id)
        assert results(msgs[2])["c1"]["status"] == "unknown"


def test_crash_after_the_outcome_was_recorded_uses_the_recorded_result(monkeypatch: Any) -> None:
    """The tool ran and its outcome was written, but the process died before the checkpoint knew."""
    calls = Calls()
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="r1")), say("refunded")])
    with scenario(shop(calls), model=model) as h:
        out = h.engine.send_message("shop", "refund")
        real = h.rt.stores.turns.finish_call

        def finish_then_die(record: CallRecord) -> None:
            real(record)
            raise Crash("died after recording the outcome")

        monkeypatch.setattr(h.rt.stores.turns, "finish_call", finish_then_die)
        with pytest.raises(Crash):
            h.engine.resolve(out.pending[0].pending_id, "approve", REVIEWER)
        monkeypatch.undo()
        assert calls.count("refund") == 1
        assert h.rt.stores.turns.calls(out.turn_id)["r1"].outcome == "ok"

        h.clock.advance(PAST_LEASE)
        resumed = h.engine.resume(out.turn_id)

        assert resumed is not None, "the turn is stuck: its recorded outcome never reached the checkpoint"
        assert resumed.stop_reason is StopReason.END_TURN
        assert calls.count("refund") == 1
        msgs = assert_protocol(h, out.session_id)
        assert results(msgs[2])["r1"] == {"tool": "refund", "args": {"x": 1}}  # what really happened


def test_crash_after_appending_results_before_the_turn_forgot_its_checkpoint(monkeypatch: Any) -> None:
    calls = Calls()
    model = ScriptedModel.from_list(
        [call(use("refund", {"x": 1}, id="r1")), call(use("refund", {"x": 2}, id="r2")), say("both")]
    )
    with scenario(shop(calls), model=model, inline=False) as h:
        out = h.engine.send_message("shop", "refund twice")
        h.engine.resolve(out.pending[0].pending_id, "approve", REVIEWER)
        real = h.rt.stores.turns.replace_turn

        def die_when_clearing(record: TurnRecord) -> TurnRecord:
            if record.checkpoint_id is None and record.status is TurnStatus.RUNNING:
                raise Crash("died right after appending the batch's results")
            return real(record)

        monkeypatch.setattr(h.rt.stores.turns, "replace_turn", die_when_clearing)
        with pytest.raises(Crash):
            h.engine.resume(out.turn_id)
        monkeypatch.undo()
        assert len(history(h, out.session_id)) == 3

        h.clock.advance(PAST_LEASE)
        again = h.engine.resume(out.turn_id)

        # the next batch pauses on its own approval; the old checkpoint is not reused for it
        assert again is not None and again.status is TurnStatus.PAUSED
        assert [p.tool_use_id for p in again.pending] == ["r2"]
        assert_protocol(h, out.session_id)
        h.engine.resolve(again.pending[0].pending_id, "approve", REVIEWER)
        h.engine.resume(out.turn_id)
        msgs = assert_protocol(h, out.session_id)
        assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant", "user", "assistant"]
        assert calls.log == [("refund", {"x": 1}), ("refund", {"x": 2})]
        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN


@pytest.mark.parametrize("by", ["rule", "human"])
def test_crash_between_appending_a_denial_and_stopping_still_stops_denied(by: str, monkeypatch: Any) -> None:
    calls = Calls()
    model = ScriptedModel.from_list(
        [call(use("lookup", {"x": 1}, id="l1"), use("refund", {"x": 2}, id="r1")), say("should not run")]
    )
    rules = {
        "rules": [
            {"tool": "lookup", "decision": "allow"},
            {"tool": "refund", "decision": "deny" if by == "rule" else "ask"},
        ],
        "default_decision": "ask",
    }
    cfg = agent("shop", [calls.tool("lookup"), calls.tool("refund")], rules)
    with scenario(cfg, model=model) as h:
        real = h.rt.stores.turns.replace_turn

        def die_when_finishing(record: TurnRecord) -> TurnRecord:
            if record.status is TurnStatus.FINISHED:
                raise Crash("died between appending the results and finishing")
            return real(record)

        if by == "rule":
            monkeypatch.setattr(h.rt.stores.turns, "replace_turn", die_when_finishing)
            with pytest.raises(Crash):
                h.engine.send_message("shop", "refund")
            turn_id = h.notifier.events("run_start")[0]["turnId"]
        else:
            out = h.engine.send_message("shop", "refund")
            turn_id = out.turn_id
            monkeypatch.setattr(h.rt.stores.turns, "replace_turn", die_when_finishing)
            with pytest.raises(Crash):
                h.engine.resolve(out.pending[0].pending_id, "deny", REVIEWER)
        monkeypatch.undo()
        sid = turn(h, turn_id).session_id
        assert [m.role for m in history(h, sid)] == ["user", "assistant", "user"]
        assert turn(h, turn_id).status is TurnStatus.RUNNING

        h.clock.advance(PAST_LEASE)
        out = h.engine.resume(turn_id)

        assert out is not None and out.stop_reason is StopReason.DENIED
        assert len(model.requests) == 1, "the model was called after a denial"
        assert calls.log == ([] if by == "rule" else [("lookup", {"x": 1})])
        msgs = assert_protocol(h, sid)
        assert len(msgs) == 3


def test_crash_after_writing_the_checkpoint_before_pausing_the_turn(monkeypatch: Any) -> None:
    """Items of a checkpoint written by a run that died are still decidable, and the turn goes on."""
    calls = Calls()
    model = ScriptedModel.from_list(
        [call(use("lookup", {"x": 1}, id="l1"), use("refund", {"x": 2}, id="r1")), say("done")]
    )
    with scenario(shop(calls), model=model) as h:
        real = h.rt.stores.checkpoints.create

        def create_then_die(cp: Any) -> None:
            real(cp)
            raise Crash("died right after writing the checkpoint")

        monkeypatch.setattr(h.rt.stores.checkpoints, "create", create_then_die)
        with pytest.raises(Crash):
            h.engine.send_message("shop", "refund")
        monkeypatch.undo()
        turn_id = h.notifier.events("run_start")[0]["turnId"]
        assert turn(h, turn_id).status is TurnStatus.RUNNING
        # the item is on the poll surface and someone decides it
        (cp,) = h.rt.stores.checkpoints.list_open()
        (pid,) = cp.outstanding
        assert h.engine.resolve(pid, "approve", REVIEWER).completed
        assert calls.log == [("lookup", {"x": 1}), ("refund", {"x": 2})]

        h.clock.advance(PAST_LEASE)
        out = h.engine.resume(turn_id)

        assert out is not None
        assert (out.status, out.stop_reason) == (TurnStatus.FINISHED, StopReason.END_TURN)
        msgs = assert_protocol(h, turn(h, turn_id).session_id)
        assert results(msgs[2]) == {
            "l1": {"tool": "lookup", "args": {"x": 1}},
            "r1": {"tool": "refund", "args": {"x": 2}},
        }
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
        res = two.engine.resolve(item.pending_id, "approve", REVIEWER)

        assert res.completed
        assert turn(two, out.turn_id).stop_reason is StopReason.END_TURN
        assert second_calls.log == [("refund", {"x": 5})]
        assert len(second_model.requests) == 1
        msgs = assert_protocol(two, out.session_id)
        assert results(msgs[2])["l1"] == {"tool": "lookup", "args": {"x": 1}}  # ran in process one
    assert first_calls.log == [("lookup", {"x": 1})]
    assert len(first_model.requests) == 1
    with opened(db, shop(Calls()), model=ScriptedModel.from_list(script)) as three:
        assert three.engine.resolve(item.pending_id, "approve", REVIEWER).already_resolved
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

        h.engine.resolve(out.pending[0].pending_id, "approve", REVIEWER)

        resumed = model.requests[1]
        assert (resumed.system, resumed.model) == ("test", "test-model")
        again = h.engine.outcome(out.turn_id)
        assert again.status is TurnStatus.PAUSED, "the old rules still ask for the second refund"
        h.engine.resolve(again.pending[0].pending_id, "approve", REVIEWER)
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
        assert [c.id for c in h.rt.stores.checkpoints.list_open()] == [cp.id]
        failed = events(h, out.turn_id, "notification_failed")
        assert {e["notification"] for e in failed} == {"run_start", "approval"}
        assert all("receiver down" in e["error"] for e in failed)

        h.engine.resolve(item.pending_id, "approve", REVIEWER)

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


@pytest.mark.parametrize("error", [RetryableModelError("overloaded"), FatalModelError("bad request")])
def test_a_model_error_finishes_the_turn_with_a_valid_history(error: Exception) -> None:
    calls = Calls()

    def respond(request: ModelRequest) -> ModelResponse:
        if sum(m.role == "assistant" for m in request.messages) == 0:
            return call(use("lookup", {"x": 1}, id="l1"))
        raise error

    model = ScriptedModel(respond)
    with scenario(shop(calls), model=model) as h:
        out = h.engine.send_message("shop", "hello")

        assert out.status is TurnStatus.FINISHED
        assert out.stop_reason is StopReason.ERROR
        assert out.text is not None and str(error) in out.text
        msgs = assert_protocol(h, out.session_id)
        assert [m.role for m in msgs] == ["user", "assistant", "user"]
        (ev,) = events(h, out.turn_id, "model_error")
        assert ev["retryable"] is isinstance(error, RetryableModelError)
        assert h.notifier.events("run_finish")[-1]["stopReason"] == "error"
        # the session is usable again
        assert h.rt.stores.turns.session_turns(out.session_id)[-1].status is TurnStatus.FINISHED


def test_a_notifier_that_cannot_even_be_built_never_loses_the_pause(tmp_path: Path) -> None:
    from loopengine.errors import ConfigError
    from loopengine.models.scripted import ScriptedModel, call, use
    from tests.harness import Calls, agent, make_harness

    calls = Calls()
    cfg = agent("broken-notifier", [calls.tool("refund")], {"default_decision": "ask"})
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="t1"))])
    h = make_harness(tmp_path / "n.db", cfg, model=model)

    def broken(_config: object) -> None:
        raise ConfigError("notifier email: LOOPENGINE_MAGIC_LINK_SECRET is not set")

    h.rt.notifier_for = broken  # type: ignore[assignment]
    try:
        out = h.engine.send_message("broken-notifier", "go")
        assert out.pending and out.status.value == "paused"
        failed = [e for e in h.rt.stores.turns.events(out.turn_id) if e["type"] == "notification_failed"]
        assert {e["notification"] for e in failed} == {"run_start", "approval"}
        assert "MAGIC_LINK_SECRET" in failed[0]["error"]
    finally:
        h.rt.stores.close()
