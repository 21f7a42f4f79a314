"""Concurrent resolves: every decision is recorded, each tool runs once, the turn resumes once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from loopengine.app.invokers import RecordingInvoker
from loopengine.app.request.resolution import Decider, Resolution
from loopengine.domain.decisions import Approval, Denial
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.harness import Calls, agent
from tests.scenario import assert_protocol, history, results, scenario, turn

RULES = {"rules": [{"tool": "lookup", "decision": "allow"}], "default_decision": "ask"}


def slow(args: dict[str, Any]) -> Any:
    time.sleep(0.05)
    return {"done": args["x"]}


def race(n: int, fn: Callable[[int], Resolution]) -> list[Resolution | BaseException]:
    """Run ``fn(i)`` on ``n`` threads released at the same moment; collect results or errors."""
    barrier = threading.Barrier(n)
    out: list[Resolution | BaseException] = [RuntimeError("did not run")] * n

    def worker(i: int) -> None:
        barrier.wait()
        try:
            out[i] = fn(i)
        except BaseException as exc:
            out[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


@pytest.mark.parametrize("attempt", range(3))  # a race: give it a few chances to go wrong
def test_two_siblings_resolved_at_once_resume_exactly_once(attempt: int) -> None:
    calls = Calls()
    cfg = agent("shop", [calls.tool(n, fn=slow) for n in ("lookup", "refund", "email")], RULES)
    model = ScriptedModel.from_list(
        [
            call(
                use("lookup", {"x": 1}, id="t1"),
                use("refund", {"x": 2}, id="t2"),
                use("email", {"x": 3}, id="t3"),
            ),
            say("done"),
        ]
    )
    with scenario(cfg, model=model, inline=False) as h:
        out = h.engine.send_message("shop", "go")
        pids = [p.pending_id for p in out.pending]
        people = [Decider("alice@example.com"), Decider("bob@example.com")]

        got = race(2, lambda i: h.engine.resolve(pids[i], Approval(), people[i]))

        assert all(isinstance(r, Resolution) for r in got), got
        assert all(isinstance(r, Resolution) and not r.already_resolved for r in got)
        assert min(r.outstanding for r in got if isinstance(r, Resolution)) == 0
        assert calls.count("refund") == calls.count("email") == 0  # a resolve records; the worker runs
        cp = h.rt.stores.checkpoints.find_by_pending(pids[0])
        assert cp is not None and cp.complete
        deciders = sorted(d.decided_by for d in cp.decisions)
        assert deciders == ["user:alice@example.com", "user:bob@example.com"]
        assert [r.tool_use_id for r in cp.results_so_far] == ["t1"]
        assert sorted(i.tool_use_id for i in cp.approved.values()) == ["t2", "t3"]
        # exactly one of the two handed the turn on
        assert isinstance(h.invoker, RecordingInvoker)
        assert h.invoker.invoked == [out.turn_id]
        assert turn(h, out.turn_id).status is TurnStatus.READY

        first = h.engine.resume(out.turn_id)
        second = h.engine.resume(out.turn_id)
        assert calls.count("refund") == calls.count("email") == 1

        assert first is not None and first.stop_reason is StopReason.END_TURN
        assert second is None
        msgs = assert_protocol(h, out.session_id)
        assert len(msgs) == 4
        assert results(msgs[2]) == {"t1": {"done": 1}, "t2": {"done": 2}, "t3": {"done": 3}}
        assert len(model.requests) == 2


def test_resumes_delivered_at_once_run_the_turn_once() -> None:
    calls = Calls()
    cfg = agent("shop", [calls.tool("refund", fn=slow)], RULES)
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="r1")), say("done")])
    with scenario(cfg, model=model, inline=False) as h:
        out = h.engine.send_message("shop", "go")
        h.engine.resolve(out.pending[0].pending_id, Approval(), Decider("a"))

        got = race(4, lambda _i: h.engine.resume(out.turn_id))  # type: ignore[arg-type,return-value]

        finished = [r for r in got if r is not None]
        assert len(finished) == 1, got
        assert len(model.requests) == 2
        assert len(history(h, out.session_id)) == 4
        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN


@pytest.mark.parametrize("inline", [False, True])
def test_five_clicks_on_the_same_pending_id_run_the_tool_once(inline: bool) -> None:
    calls = Calls()
    cfg = agent("shop", [calls.tool("refund", fn=slow)], RULES)
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="r1")), say("done")])
    with scenario(cfg, model=model, inline=inline) as h:
        out = h.engine.send_message("shop", "go")
        pid = out.pending[0].pending_id

        got = race(5, lambda i: h.engine.resolve(pid, Approval(), Decider(f"user{i}")))

        assert all(isinstance(r, Resolution) for r in got), got
        winners = [r for r in got if isinstance(r, Resolution) and not r.already_resolved]
        assert len(winners) == 1
        assert sum(isinstance(r, Resolution) and r.already_resolved for r in got) == 4
        h.deliver_resumes()
        assert calls.count("refund") == 1
        cp = h.rt.stores.checkpoints.find_by_pending(pid)
        assert cp is not None
        assert [d.kind for d in cp.decisions] == ["approve"]
        if not inline:
            h.engine.resume(out.turn_id)
        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN
        assert_protocol(h, out.session_id)
        assert len(model.requests) == 2


@pytest.mark.parametrize("attempt", range(3))
def test_approve_and_deny_racing_on_siblings_agree(attempt: int) -> None:
    """One approves t2 while another denies t3: the batch ends denied with a consistent record."""
    calls = Calls()
    cfg = agent("shop", [calls.tool(n, fn=slow) for n in ("refund", "email")], RULES)
    model = ScriptedModel.from_list(
        [call(use("refund", {"x": 2}, id="t2"), use("email", {"x": 3}, id="t3")), say("done")]
    )
    with scenario(cfg, model=model, inline=False) as h:
        out = h.engine.send_message("shop", "go")
        by_tool = {p.tool: p.pending_id for p in out.pending}
        moves: list[tuple[str, Approval | Denial]] = [
            (by_tool["refund"], Approval()),
            (by_tool["email"], Denial()),
        ]

        got = race(2, lambda i: h.engine.resolve(moves[i][0], moves[i][1], Decider(f"u{i}")))

        assert all(isinstance(r, Resolution) for r in got), got
        assert isinstance(h.invoker, RecordingInvoker)
        approved_first = h.invoker.invoked == [out.turn_id]
        if approved_first:  # the denial closed a batch holding the approval: the worker runs it
            assert calls.count("refund") == 0  # never in the deny request
            h.engine.resume(out.turn_id)
        assert calls.count("email") == 0
        assert turn(h, out.turn_id).stop_reason is StopReason.DENIED
        msgs = assert_protocol(h, out.session_id)
        answered = results(msgs[2])
        assert answered["t3"]["status"] == "denied"
        # the approval landed before the denial closed the batch (it ran, in the worker), or was
        # skipped by it (the deny request finished the turn itself)
        if approved_first:
            assert answered["t2"] == {"done": 2} and calls.count("refund") == 1
        else:
            assert answered["t2"]["status"] == "skipped" and calls.count("refund") == 0
        assert len(model.requests) == 1  # a denial finishes the turn without a model call
