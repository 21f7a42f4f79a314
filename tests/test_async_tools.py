"""``async def`` tools and tool timeouts: the same at-most-once path as any tool.

GIVEN async tools (and slow sync ones), WHEN turns run them, THEN an async tool is claimed, run once
and its outcome recorded like a sync one, even with two workers racing for the call; a tool that
outlives its timeout is recorded ``unknown`` (an async one is cancelled, a sync one is left behind
and its late result discarded) within about its timeout; a stop cancels a running async tool; an
async tool's failure is an error the model sees.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from loopengine import Tool, ToolContext, tool_from_model
from loopengine.app.worker.batch import Call, run_call
from loopengine.app.worker.tool_calls import GRACE
from loopengine.domain.decisions import Approval
from loopengine.domain.messages import ToolUseBlock
from loopengine.domain.principals import Principal
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.harness import ECHO_SCHEMA, agent
from tests.scenario import events, history, opened, results, scenario

ALLOW = {"rules": [], "default_decision": "allow"}
ASK = {"rules": [], "default_decision": "ask"}
OPERATOR = Principal("user:ops", "operator")


class Charge(BaseModel):
    """Arguments of the test's charge tool."""

    x: int


def one_call(call_id: str = "c1") -> ScriptedModel:
    return ScriptedModel.from_list([call(use("charge", {"x": 5}, id=call_id)), say("done")])


def test_an_async_tool_runs_once_on_a_loop_of_its_own_with_its_context() -> None:
    ran: list[tuple[str, bool]] = []

    async def charge(args: Charge, ctx: ToolContext) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        ran.append((ctx.idempotency_key, asyncio.get_running_loop().is_running()))
        return {"charged": args.x}

    cfg = agent("shop", [tool_from_model("charge", "Charge.", Charge, charge)], ALLOW)
    with scenario(cfg, model=one_call()) as h:
        out = h.engine.send_message("shop", "go")
        assert out.status is TurnStatus.FINISHED
        assert results(history(h, out.session_id)[2]) == {"c1": {"charged": 5}}
        [outcome] = events(h, out.turn_id, "tool_outcome")
        assert outcome["outcome"] == "ok" and outcome["idempotencyKey"] == ran[0][0]
        assert h.rt.stores.turns.calls(out.turn_id)["c1"].outcome == "ok"
    assert ran == [(ToolContext.key_for("", out.turn_id, "c1"), True)]


def test_a_plain_tool_returning_an_awaitable_and_an_async_callable_object_are_awaited() -> None:
    class Pay:
        async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> str:
            return f"paid {args['x']} under {ctx.call_id}"

    async def later(args: dict[str, Any]) -> str:
        return f"later {args['x']}"

    tools = [Tool("charge", "c", ECHO_SCHEMA, Pay()), Tool("peek", "p", ECHO_SCHEMA, lambda a: later(a))]
    both = call(use("charge", {"x": 1}, id="a"), use("peek", {"x": 2}, id="b"))
    with scenario(agent("shop", tools, ALLOW), model=ScriptedModel.from_list([both, say("ok")])) as h:
        out = h.engine.send_message("shop", "go")
        assert results(history(h, out.session_id)[2]) == {"a": "paid 1 under a", "b": "later 2"}


def test_an_approved_async_tool_runs_once_when_the_turn_resumes() -> None:
    count: list[str] = []

    async def charge(args: Charge, ctx: ToolContext) -> str:
        count.append(str(ctx.decided_by))
        return "charged"

    cfg = agent("shop", [tool_from_model("charge", "Charge.", Charge, charge)], ASK)
    with scenario(cfg, model=one_call()) as h:
        out = h.engine.send_message("shop", "go")
        h.engine.resolve(out.pending[0].pending_id, Approval(), OPERATOR)
        again = h.engine.resolve(out.pending[0].pending_id, Approval(), OPERATOR)
        assert again.already_resolved
        assert h.engine.outcome(out.turn_id).status is TurnStatus.FINISHED
    assert count == ["user:ops"]


def test_two_workers_racing_for_one_async_call_run_it_once(tmp_path: Path) -> None:
    """Two processes on one database both try the call: the claim lets exactly one run it."""
    runs: list[int] = []
    inside = threading.Barrier(2, timeout=5)

    async def charge(args: Charge) -> str:
        runs.append(args.x)
        await asyncio.sleep(0.3)  # long enough for the other worker to try
        return "charged"

    def racer(db: Path, turn: Any, answers: list[Any]) -> None:
        cfg = agent("shop", [tool_from_model("charge", "Charge.", Charge, charge)], ASK)
        with opened(db, cfg, model=one_call(), inline=False) as h:
            inside.wait()
            answers.append(run_call(h.rt, cfg, turn, Call(ToolUseBlock("c1", "charge", {"x": 5}))).result)

    db = tmp_path / "race.db"
    cfg = agent("shop", [tool_from_model("charge", "Charge.", Charge, charge)], ASK)
    with opened(db, cfg, model=one_call(), inline=False) as h:
        out = h.engine.send_message("shop", "go")
        turn = h.rt.stores.turns.get_turn(out.turn_id)
    answers: list[Any] = []
    threads = [threading.Thread(target=racer, args=(db, turn, answers)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert runs == [5]  # once
    assert len(answers) == 2 and sorted(a.content == "charged" for a in answers) == [False, True]
    loser = next(a for a in answers if a.content != "charged")
    assert loser.is_error and '"status": "unknown"' in loser.content  # never "done", never run again


def test_an_async_tool_past_its_timeout_is_cancelled_and_unknown() -> None:
    cancelled = threading.Event()

    async def charge(args: Charge) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "too late"

    tool = tool_from_model("charge", "Charge.", Charge, charge, timeout=0.3)
    with scenario(agent("shop", [tool], ALLOW), model=one_call()) as h:
        began = time.monotonic()
        out = h.engine.send_message("shop", "go")
        took = time.monotonic() - began
        told = results(history(h, out.session_id)[2])["c1"]
        [outcome] = events(h, out.turn_id, "tool_outcome")
    assert cancelled.is_set() and took < 0.3 + GRACE + 1.0
    assert (
        told["status"] == "unknown"
        and "timeout of 0.3 s" in told["reason"]
        and "not retried" in told["reason"]
    )
    assert outcome["outcome"] == "unknown" and outcome["timedOut"] is True
    assert out.status is TurnStatus.FINISHED  # the model was told, and answered


def test_a_sync_tool_past_its_timeout_is_left_behind_and_its_late_result_discarded() -> None:
    release, returned = threading.Event(), threading.Event()

    def charge(args: dict[str, Any]) -> str:
        release.wait(30)
        returned.set()
        return "charged, late"

    tool = Tool("charge", "Charge.", ECHO_SCHEMA, charge, timeout=0.3)
    with scenario(agent("shop", [tool], ALLOW), model=one_call()) as h:
        began = time.monotonic()
        out = h.engine.send_message("shop", "go")
        took = time.monotonic() - began
        release.set()
        assert returned.wait(5)
        told = results(history(h, out.session_id)[2])["c1"]
        record = h.rt.stores.turns.calls(out.turn_id)["c1"]
    assert took < 0.3 + GRACE + 1.0
    assert told["status"] == "unknown" and "may still have had an effect" in told["reason"]
    assert record.outcome == "unknown" and "late" not in str(record.result)


def test_agent_yaml_timeout_is_the_one_that_counts() -> None:
    """A Tool's own timeout of 600 s; the config (as agent.yaml would set it) says 0.2 s."""

    async def charge(args: Charge) -> str:
        await asyncio.sleep(10)
        return "late"

    tool = tool_from_model("charge", "Charge.", Charge, charge, timeout=600)
    cfg = agent("shop", [replace(tool, timeout=0.2)], ALLOW)
    with scenario(cfg, model=one_call()) as h:
        began = time.monotonic()
        h.engine.send_message("shop", "go")
        assert time.monotonic() - began < 0.2 + GRACE + 1.0


def test_a_stop_cancels_a_running_async_tool_and_its_outcome_is_unknown() -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def charge(args: Charge, ctx: ToolContext) -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "too late"

    cfg = agent("shop", [tool_from_model("charge", "Charge.", Charge, charge, timeout=60)], ALLOW)
    with scenario(cfg, model=one_call()) as h:
        box: list[Any] = []
        runner = threading.Thread(target=lambda: box.append(h.engine.send_message("shop", "go")))
        runner.start()
        assert started.wait(10)
        turn_id = str(h.notifier.events("run_start")[0]["turnId"])
        asked = time.monotonic()
        h.engine.cancel(turn_id, OPERATOR)
        runner.join(15)
        stopped_in = time.monotonic() - asked
        [out] = box
        told = results(history(h, out.session_id)[2])["c1"]
        [outcome] = events(h, turn_id, "tool_outcome")
    assert cancelled.is_set() and stopped_in < 3.0
    assert out.stop_reason is StopReason.CANCELLED
    assert told["status"] == "unknown" and "stopped while this call ran" in told["reason"]
    assert outcome["outcome"] == "unknown" and outcome["stopped"] is True


def test_an_async_tools_failure_is_an_error_the_model_sees() -> None:
    async def charge(args: Charge) -> str:
        raise RuntimeError("card declined")

    cfg = agent("shop", [tool_from_model("charge", "Charge.", Charge, charge)], ALLOW)
    with scenario(cfg, model=one_call()) as h:
        out = h.engine.send_message("shop", "go")
        told = results(history(h, out.session_id)[2])["c1"]
        assert told == {"status": "error", "error": "RuntimeError: card declined"}
        assert events(h, out.turn_id, "tool_outcome")[0]["outcome"] == "error"
