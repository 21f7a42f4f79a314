"""Bucket, then execute: what a batch does does not depend on the order the model listed its calls.

Every tool_use is evaluated before anything runs. Allowed calls run, ``ask`` and questions pend, and
a synchronous denial anywhere cancels the whole batch: nothing runs, every sibling is ``skipped``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopengine.authoring.tools import ASK_USER
from loopengine.domain.messages import check_protocol
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.harness import Calls, agent, make_harness
from tests.scenario import assert_protocol, results, scenario, turn

KIND_TOOL = {"allow": "safe", "ask": "gated", "deny": "blocked", "question": ASK_USER}
RULES = {
    "rules": [
        {"tool": "safe", "decision": "allow"},
        {"tool": "blocked", "decision": "deny", "reason": "never"},
    ],
    "default_decision": "ask",
}


@dataclass(frozen=True)
class Planned:
    """One call of a generated batch."""

    id: str
    kind: str

    @property
    def args(self) -> dict[str, Any]:
        if self.kind == "question":
            return {"question": f"question {self.id}?"}
        return {"x": int(self.id[1:])}


@dataclass(frozen=True)
class Observed:
    """Everything a batch did, independent of order."""

    executed: tuple[tuple[str, int], ...]
    pending: tuple[tuple[str, str], ...]
    stop: StopReason | None
    status: TurnStatus
    ran_before_pause: tuple[str, ...]
    final: tuple[tuple[str, str], ...]
    model_calls: int


def run(batch: list[Planned]) -> Observed:
    calls = Calls()
    cfg = agent("order", [calls.tool(n) for n in ("safe", "gated", "blocked")], RULES)
    model = ScriptedModel.from_list(
        [call(*(use(KIND_TOOL[p.kind], p.args, id=p.id) for p in batch)), say("done")]
    )
    with scenario(cfg, model=model) as h:
        out = h.engine.send_message("order", "go")
        msgs = assert_protocol(h, out.session_id)
        stored = turn(h, out.turn_id)
        assert stored.status is out.status and stored.stop_reason is out.stop_reason
        ran: tuple[str, ...] = ()
        pending: tuple[tuple[str, str], ...] = ()
        if stored.status is TurnStatus.PAUSED:
            assert stored.checkpoint_id is not None
            cp = h.rt.stores.checkpoints.get(stored.checkpoint_id)
            assert cp is not None
            pending = tuple(sorted((i.tool_use_id, i.kind) for i in cp.outstanding.values()))
            assert pending == tuple(sorted((i.tool_use_id, i.kind) for i in out.pending))
            ran = tuple(sorted(r.tool_use_id for r in cp.results_so_far))
        else:
            assert h.rt.stores.checkpoints.list_open("") == []
        final: tuple[tuple[str, str], ...] = ()
        if msgs[-1].role == "user" and msgs[-1].tool_results:
            final = tuple(sorted((k, _status(v)) for k, v in results(msgs[-1]).items()))
        elif len(msgs) > 2:
            final = tuple(sorted((k, _status(v)) for k, v in results(msgs[2]).items()))
        return Observed(
            executed=tuple(sorted((name, args["x"]) for name, args in calls.log)),
            pending=pending,
            stop=stored.stop_reason,
            status=stored.status,
            ran_before_pause=ran,
            final=final,
            model_calls=len(model.requests),
        )


def _status(value: Any) -> str:
    return str(value.get("status", "ok")) if isinstance(value, dict) else "answer"


_kinds = st.lists(st.sampled_from(["allow", "ask", "question"]), min_size=1, max_size=5)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[Planned], list[Planned]]:
    kinds = draw(_kinds)
    if draw(st.booleans()):
        kinds.insert(draw(st.integers(0, len(kinds))), "deny")
    batch = [Planned(f"c{i}", k) for i, k in enumerate(kinds)]
    return batch, draw(st.permutations(batch))


@settings(max_examples=30, deadline=None)
@given(batches())
def test_order_does_not_matter(pair: tuple[list[Planned], list[Planned]]) -> None:
    batch, shuffled = pair
    first, second = run(batch), run(shuffled)

    assert first == second
    kinds = {p.kind for p in batch}
    allowed = tuple(sorted(("safe", int(p.id[1:])) for p in batch if p.kind == "allow"))
    if "deny" in kinds:
        # a synchronous deny cancels the whole batch
        assert first.executed == ()
        assert first.stop is StopReason.DENIED and first.status is TurnStatus.FINISHED
        assert first.pending == ()
        expected = {p.id: ("denied" if p.kind == "deny" else "skipped") for p in batch}
        assert dict(first.final) == expected
        assert first.model_calls == 1
    elif kinds & {"ask", "question"}:
        assert first.executed == allowed
        assert first.ran_before_pause == tuple(sorted(p.id for p in batch if p.kind == "allow"))
        waiting = {(p.id, "approval" if p.kind == "ask" else "question") for p in batch if p.kind != "allow"}
        assert set(first.pending) == waiting
        assert first.stop is (StopReason.PENDING_APPROVAL if "ask" in kinds else StopReason.PENDING_QUESTION)
        assert first.status is TurnStatus.PAUSED
    else:
        assert first.executed == allowed
        assert first.stop is StopReason.END_TURN
        assert dict(first.final) == {p.id: "ok" for p in batch}
        assert first.model_calls == 2


def test_a_deny_cancels_the_batch_wherever_it_is() -> None:
    for position in range(4):
        kinds = ["allow", "ask", "question"]
        kinds.insert(position, "deny")
        batch = [Planned(f"c{i}", k) for i, k in enumerate(kinds)]
        got = run(batch)
        assert got.executed == ()
        assert got.stop is StopReason.DENIED
        statuses = dict(got.final)
        assert statuses.pop(f"c{position}") == "denied"
        assert set(statuses.values()) == {"skipped"}


def test_model_mistakes_are_answered_at_once_without_asking_anyone(tmp_path: Path) -> None:

    calls = Calls()
    cfg = agent("mistakes", [calls.tool("echo")], {"default_decision": "ask"})
    model = ScriptedModel.from_list(
        [
            call(
                use("no_such_tool", {"x": 1}, id="t1"),
                use("echo", {"x": "not an integer"}, id="t2"),
                use(ASK_USER, {"options": ["a"]}, id="t3"),
            ),
            say("sorry"),
        ]
    )
    h = make_harness(tmp_path / "m.db", cfg, model=model)
    try:
        out = h.engine.send_message("mistakes", "go")
        assert out.stop_reason is not None and out.stop_reason.value == "end_turn"
        assert calls.count("echo") == 0 and h.notifier.events("approval") == []
        history = h.rt.stores.sessions.load(out.session_id)
        check_protocol(history)
        results = {r.tool_use_id: r for r in history[2].tool_results}
        assert "unknown tool 'no_such_tool'" in results["t1"].content and results["t1"].is_error
        assert "x" in results["t2"].content and results["t2"].is_error
        assert "question" in results["t3"].content and results["t3"].is_error
    finally:
        h.rt.stores.close()
