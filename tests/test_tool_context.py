"""A tool's context (``loopengine.ToolContext``), its idempotency key, its timeout and the time it needs.

GIVEN tools that ask for a context by annotation, WHEN turns run them (allowed, approved through the
API with an edit, resumed by another process, recovered after a crash, stopped mid-call), THEN the
context names the call exactly (tenant, agent, session, turn, call, who approved it, the edit, the
deadline), the idempotency key is the same for that call everywhere and appears in the audit, a tool
without the annotation gets nothing, a stop reaches the running tool, and a call whose timeout does
not fit the invocation's time is handed to the resume worker before it starts.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import pytest
from pydantic import BaseModel

from loopengine import Tool, ToolContext, tool_from_model
from loopengine.authoring.agent import from_snapshot
from loopengine.authoring.context import DEFAULT_TOOL_TIMEOUT, ToolCancelled, idempotency_key
from loopengine.authoring.registry import AgentRegistry
from loopengine.authoring.tools import context_parameter
from loopengine.domain.base.errors import AgentUnavailable
from loopengine.domain.decisions import Approval
from loopengine.domain.principals import Principal
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.http import api
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.agent_folders import AGENT_YAML, write_agent
from tests.handler_support import call as call_handler
from tests.handler_support import load_event, with_body
from tests.harness import ECHO_SCHEMA, Build, agent
from tests.scenario import events, history, opened, results, scenario

if TYPE_CHECKING:
    from loopengine import ToolContext as LateContext  # only a string annotation names it

LAST_LINE = AGENT_YAML.count("\n") + 1
"""The line a key appended to the test agent's agent.yaml is on."""
KEY = re.compile(r"^le_[0-9a-f]{40}$")
OPERATOR = Principal("user:ops", "operator")
ASK = {"rules": [], "default_decision": "ask"}
ALLOW = {"rules": [], "default_decision": "allow"}


class Seen:
    """What each run of a context-taking tool was handed."""

    def __init__(self) -> None:
        self.contexts: list[ToolContext] = []
        self.args: list[dict[str, Any]] = []

    def tool(self, name: str = "charge", **kw: Any) -> Tool:
        def run(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
            self.contexts.append(ctx)
            self.args.append(args)
            return {"charged": args["x"], "key": ctx.idempotency_key}

        return Tool(name, "Charge something.", ECHO_SCHEMA, run, **kw)


def charge_script(call_id: str = "c1") -> ScriptedModel:
    return ScriptedModel.from_list([call(use("charge", {"x": 5}, id=call_id)), say("charged")])


# -- the context's fields ---------------------------------------------------------------------------


def test_an_allowed_call_gets_its_tenant_ids_key_and_deadline() -> None:
    seen = Seen()
    with scenario(agent("shop", [seen.tool()], ALLOW), model=charge_script()) as h:
        out = h.engine.send_message("shop", "charge me", tenant="acme", sender=OPERATOR)
        assert out.status is TurnStatus.FINISHED
        [ctx] = seen.contexts
        assert (ctx.tenant, ctx.agent, ctx.session_id, ctx.turn_id) == (
            "acme",
            "shop",
            out.session_id,
            out.turn_id,
        )
        assert (ctx.call_id, ctx.tool) == ("c1", "charge")
        assert ctx.decision == "allow" and not ctx.approved
        assert ctx.decided_by is None and ctx.edited_by is None and ctx.proposed_args is None
        assert ctx.timeout == DEFAULT_TOOL_TIMEOUT == 20.0
        assert ctx.deadline == h.clock.now() + DEFAULT_TOOL_TIMEOUT  # the engine's clock (a fake here)
        assert ctx.remaining() == DEFAULT_TOOL_TIMEOUT and not ctx.cancelled
        assert KEY.match(ctx.idempotency_key)
        assert ctx.idempotency_key == ToolContext.key_for("acme", out.turn_id, "c1")
        [outcome] = events(h, out.turn_id, "tool_outcome")
        assert outcome["idempotencyKey"] == ctx.idempotency_key and outcome["outcome"] == "ok"


def test_the_key_is_a_pure_function_of_tenant_turn_and_call() -> None:
    key = idempotency_key("acme", "trn_1", "toolu_1")
    assert (
        key == idempotency_key("acme", "trn_1", "toolu_1") == ToolContext.key_for("acme", "trn_1", "toolu_1")
    )
    others = {
        idempotency_key("", "trn_1", "toolu_1"),
        idempotency_key("acme", "trn_2", "toolu_1"),
        idempotency_key("acme", "trn_1", "toolu_2"),
        idempotency_key("a", "cme|trn_1", "toolu_1"),  # no two triples share an encoding
        idempotency_key("acme", "trn_1toolu_1", ""),
    }
    assert key not in others and len(others) == 5
    assert all(KEY.match(k) for k in others)


def test_approved_through_the_api_with_an_edit_names_the_decider_the_edit_and_the_proposal(
    install_harness: Build,
) -> None:
    seen = Seen()
    h = install_harness(agent("shop", [seen.tool()], ASK), model=charge_script())
    status, body = call_handler(
        api.handler, with_body(load_event("post_message", **{"customer-service": "shop"}), {"message": "go"})
    )
    assert status == 202 and body["status"] == "paused" and seen.contexts == []
    pending_id = body["pendingItems"][0]["pendingId"]
    resolve = {"decision": "approve", "editedArgs": {"x": 3, "note": "agreed"}, "comment": "cap it at 3"}
    status, _ = call_handler(
        api.handler, with_body(load_event("resolve_approve", pendingId=pending_id), resolve)
    )
    assert status in (200, 202)

    [ctx] = seen.contexts
    assert seen.args == [{"x": 3, "note": "agreed"}]  # the edited arguments run
    decided = next(e for e in h.engine.audit(body["turnId"]) if e["type"] == "decided")
    assert ctx.decision == "approve" and ctx.approved
    assert ctx.decided_by == decided["decidedBy"] and "admin" in str(ctx.decided_by)
    assert ctx.decided_via == decided["channel"] == "api"
    assert ctx.decided_at == decided["at"] and ctx.comment == "cap it at 3"
    assert ctx.edited_by == ctx.decided_by and ctx.proposed_args == {"x": 5}
    assert ctx.idempotency_key == ToolContext.key_for("", body["turnId"], "c1")
    assert h.engine.outcome(body["turnId"]).status is TurnStatus.FINISHED


def test_an_approval_without_an_edit_names_no_editor(install_harness: Build) -> None:
    seen = Seen()
    h = install_harness(agent("shop", [seen.tool()], ASK), model=charge_script())
    out = h.engine.send_message("shop", "go")
    h.engine.resolve(out.pending[0].pending_id, Approval(), Principal("user:alice", "user"))
    [ctx] = seen.contexts
    assert (ctx.decided_by, ctx.edited_by, ctx.proposed_args) == ("user:alice", None, None)


def test_the_operator_finds_an_unknown_call_by_its_key_in_the_turns_audit(install_harness: Build) -> None:
    """GET /turns/{id}: the call's toolUseId gives the key; its tool_outcome event carries it too."""
    seen = Seen()
    h = install_harness(agent("shop", [seen.tool()], ALLOW), model=charge_script())
    out = h.engine.send_message("shop", "go", tenant="acme", sender=OPERATOR)
    status, turn = call_handler(api.handler, load_event("get_turn", turnId=out.turn_id))
    assert status == 200
    [outcome] = [e for e in turn["audit"] if e["type"] == "tool_outcome"]
    assert outcome["idempotencyKey"] == ToolContext.key_for("acme", turn["turnId"], outcome["toolUseId"])
    assert outcome["idempotencyKey"] == seen.contexts[0].idempotency_key


# -- stable across processes, resumes and recovery ---------------------------------------------------


class Crash(BaseException):
    """The process dies here (nothing in the library catches a BaseException)."""


def test_the_key_is_the_same_in_the_process_that_resumes_the_turn(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    first, second = Seen(), Seen()
    with opened(db, agent("shop", [first.tool()], ASK), model=charge_script(), inline=False) as a:
        out = a.engine.send_message("shop", "go", tenant="acme", sender=OPERATOR)
        [item] = out.pending
        expected = ToolContext.key_for("acme", out.turn_id, item.tool_use_id)
    with opened(db, agent("shop", [second.tool()], ASK), model=charge_script(), inline=False) as b:
        b.engine.resolve(item.pending_id, Approval(), OPERATOR)
        b.deliver_resumes()
        assert b.engine.outcome(out.turn_id).status is TurnStatus.FINISHED
    assert first.contexts == [] and [c.idempotency_key for c in second.contexts] == [expected]


def test_a_call_cut_short_by_a_crash_is_unknown_and_its_audit_has_the_key_the_tool_was_given(
    tmp_path: Path,
) -> None:
    db = tmp_path / "shared.db"
    handed: list[str] = []

    def dies(args: dict[str, Any], ctx: ToolContext) -> Any:
        handed.append(ctx.idempotency_key)
        raise Crash("the process dies after the request went out")

    cfg = agent("shop", [Tool("charge", "Charge.", ECHO_SCHEMA, dies)], ALLOW)
    with opened(db, cfg, model=charge_script()) as a:
        with pytest.raises(Crash):
            a.engine.send_message("shop", "go", tenant="acme", sender=OPERATOR)
        turn_id = str(a.notifier.events("run_start")[0]["turnId"])
    with opened(db, cfg, model=charge_script()) as b:
        b.clock.advance(61)  # past the dead runner's lease
        assert b.engine.sweep().recovered == 1
        [outcome] = events(b, turn_id, "tool_outcome")
        assert b.engine.outcome(turn_id).status is TurnStatus.FINISHED
    assert len(handed) == 1  # never run again
    assert outcome["outcome"] == "unknown" and outcome["idempotencyKey"] == handed[0]
    assert handed[0] == ToolContext.key_for("acme", turn_id, "c1")


# -- who gets a context: the annotation decides -----------------------------------------------------


class ToolContextLookalike:
    """A class of the author's own that happens to share the name."""


def test_only_the_annotation_brings_a_context() -> None:
    def plain(args: dict[str, Any]) -> Any: ...
    def named_only(args: dict[str, Any], ctx: Any = None) -> Any: ...
    def unannotated(args, ctx=None):  # type: ignore[no-untyped-def]
        ...
    def other_type(args: dict[str, Any], ctx: int = 0) -> Any: ...
    def lookalike(args: dict[str, Any], ctx: ToolContextLookalike | None = None) -> Any: ...
    def annotated(args: dict[str, Any], context: ToolContext) -> Any: ...
    def optional(args: dict[str, Any], ctx: Optional[ToolContext] = None) -> Any: ...  # noqa: UP045
    def union(args: dict[str, Any], ctx: ToolContext | None = None) -> Any: ...
    def late(args: dict[str, Any], ctx: LateContext) -> Any: ...
    def first(ctx: ToolContext, args: dict[str, Any]) -> Any: ...

    for fn in (plain, named_only, unannotated, other_type, lookalike, print, len):
        assert context_parameter(fn) is None, fn
    names = {fn.__name__: context_parameter(fn) for fn in (annotated, optional, union, first)}
    assert {k: v.name if v else None for k, v in names.items()} == {
        "annotated": "context",
        "optional": "ctx",
        "union": "ctx",
        "first": "ctx",
    }
    # the author's own class called ToolContext is not ours, as an object or as a string annotation
    for prelude in ("", "from __future__ import annotations\n"):
        own: dict[str, Any] = {}
        exec(
            prelude + "class ToolContext: ...\ndef hostile(args, ctx: ToolContext = None): return ctx\n", own
        )
        assert context_parameter(own["hostile"]) is None
    # a name only imported for type checkers is taken at its word only if it says ToolContext
    late.__annotations__["ctx"] = "ToolContext"
    assert context_parameter(late) is not None
    late.__annotations__["ctx"] = "SomethingElse"
    assert context_parameter(late) is None


def test_a_parameter_named_ctx_without_the_annotation_gets_nothing_injected() -> None:
    got: list[Any] = []

    def run(args: dict[str, Any], ctx: Any = "nothing") -> Any:
        got.append(ctx)
        return "ran"

    def first(ctx: ToolContext, args: dict[str, Any]) -> Any:
        got.append((ctx.call_id, args))
        return "ran"

    tools = [Tool("charge", "c", ECHO_SCHEMA, run), Tool("peek", "p", ECHO_SCHEMA, first)]
    model = ScriptedModel.from_list(
        [call(use("charge", {"x": 1}, id="a"), use("peek", {"x": 2}, id="b")), say("ok")]
    )
    with scenario(agent("shop", tools, ALLOW), model=model) as h:
        out = h.engine.send_message("shop", "go")
        assert out.status is TurnStatus.FINISHED
    assert got == ["nothing", ("b", {"x": 2})]


def test_a_tool_without_a_context_parameter_still_runs_and_direct_calls_still_work() -> None:
    class Args(BaseModel):
        x: int

    def legacy(args: Args) -> dict[str, int]:
        return {"x": args.x}

    def wants(args: Args, ctx: ToolContext) -> dict[str, Any]:
        return {"x": args.x, "key": ctx.idempotency_key}

    old, new = tool_from_model("legacy", "l", Args, legacy), tool_from_model("wants", "w", Args, wants)
    assert old.execute({"x": 1}) == {"x": 1}  # code (and tests) that call a tool directly keep working
    ctx = ToolContext.for_call(turn_id="trn_t", call_id="c")
    assert new.execute({"x": 2}, ctx) == {"x": 2, "key": ToolContext.key_for("", "trn_t", "c")}
    model = ScriptedModel.from_list([call(use("legacy", {"x": 7}, id="l1")), say("ok")])
    with scenario(agent("shop", [old], ALLOW), model=model) as h:
        out = h.engine.send_message("shop", "go")
        assert results(history(h, out.session_id)[2]) == {"l1": {"x": 7}}


# -- a stop reaches the running tool ----------------------------------------------------------------


def test_a_cancel_reaches_a_running_tool_through_its_context() -> None:
    started, saw = threading.Event(), threading.Event()

    def waits(args: dict[str, Any], ctx: ToolContext) -> Any:
        started.set()
        for _ in range(500):  # ~10 s at most
            if ctx.cancelled:
                saw.set()
                break
            time.sleep(0.02)
        ctx.check()  # raises ToolCancelled: this tool stops at a safe point
        return "finished anyway"

    cfg = agent("shop", [Tool("charge", "c", ECHO_SCHEMA, waits)], ALLOW)
    with scenario(cfg, model=charge_script()) as h:
        box: list[Any] = []
        runner = threading.Thread(target=lambda: box.append(h.engine.send_message("shop", "go")))
        runner.start()
        assert started.wait(10)
        turn_id = str(h.notifier.events("run_start")[0]["turnId"])
        asked = time.monotonic()
        h.engine.cancel(turn_id, OPERATOR)
        assert saw.wait(5), "the tool never saw the stop"
        seen_after = time.monotonic() - asked
        runner.join(10)
        [out] = box
        assert out.stop_reason is StopReason.CANCELLED
        told = results(history(h, out.session_id)[2])["c1"]
        assert told["status"] == "error" and ToolCancelled.__name__ in told["error"]
    assert seen_after < 2.5  # the runner looks at the turn once a second


# -- timeouts in agent.yaml, in the snapshot ----------------------------------------------------------

TOOLS_WITH_TIMEOUT = """\
from loopengine import Tool

SCHEMA = {"type": "object", "properties": {}}
TOOLS = [
    Tool("refund", "Refund.", SCHEMA, lambda args: "ok", timeout=45),
    Tool("peek", "Peek.", SCHEMA, lambda args: "ok"),
]
"""


def test_agent_yaml_timeouts_win_over_the_tools_own_and_are_pinned_in_the_snapshot(tmp_path: Path) -> None:
    yaml = AGENT_YAML.format(name="shop").replace("tools: [refund]", "tools: [refund, peek]")
    write_agent(tmp_path, "shop", agent=yaml, tools=TOOLS_WITH_TIMEOUT)
    config = AgentRegistry(package=None, paths=[tmp_path]).get("shop")
    assert (config.timeout_of("refund"), config.timeout_of("peek")) == (45.0, DEFAULT_TOOL_TIMEOUT)
    plain_hash = config.config_hash()
    assert config.snapshot()["tool_timeouts"] == {"refund": 45.0}

    write_agent(
        tmp_path, "shop", agent=yaml + "tool_timeouts: {refund: 90s, peek: 2m}\n", tools=TOOLS_WITH_TIMEOUT
    )
    config = AgentRegistry(package=None, paths=[tmp_path]).get("shop")
    assert (config.timeout_of("refund"), config.timeout_of("peek")) == (90.0, 120.0)
    assert config.config_hash() != plain_hash
    resumed = from_snapshot(config.snapshot(), {t.name: t.execute for t in config.tools})
    assert (resumed.timeout_of("refund"), resumed.timeout_of("peek")) == (90.0, 120.0)
    assert resumed.config_hash() == config.config_hash()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "tool_timeouts: {nope: 10s}\n",
            f"agent.yaml:{LAST_LINE}: tool_timeouts.nope: 'nope' is not a tool of this agent",
        ),
        ("tool_timeouts: {refund: 11m}\n", "tool_timeouts.refund: at most 600s (10m), not 660s"),
        ("tool_timeouts: {refund: soon}\n", "is not a duration like 90s"),
    ],
)
def test_agent_yaml_timeouts_are_checked(tmp_path: Path, extra: str, message: str) -> None:
    write_agent(tmp_path, "shop", agent=AGENT_YAML.format(name="shop") + extra)
    with pytest.raises(AgentUnavailable) as info:
        AgentRegistry(package=None, paths=[tmp_path]).get("shop")
    assert any(message in str(p) for p in info.value.problems), info.value.problems


@pytest.mark.parametrize("timeout", [0, -1, 601, float("nan"), True, "20"])
def test_a_tool_refuses_a_timeout_it_cannot_keep(timeout: Any) -> None:
    with pytest.raises(ValueError, match="timeout must be"):
        Tool("t", "t", ECHO_SCHEMA, lambda a: a, timeout=timeout)


# -- a call runs only where its timeout fits ------------------------------------------------------------


def test_a_call_that_does_not_fit_the_invocations_time_is_handed_on_before_it_starts() -> None:
    seen = Seen()
    with scenario(agent("shop", [seen.tool(timeout=20)], ALLOW), model=charge_script(), inline=False) as h:
        out = h.engine.send_message("shop", "go", budget_seconds=25, remaining_seconds=15)
        assert out.status is TurnStatus.READY or out.status.public() == "running"
        assert seen.contexts == [] and h.rt.stores.turns.calls(out.turn_id) == {}
        [handed] = events(h, out.turn_id, "handed_off")
        assert (handed["toolUseId"], handed["timeout"]) == ("c1", 20.0)
        # the resume worker has no more time than the request had: it runs the call anyway (once)
        assert h.invoker.invoked == [out.turn_id]  # type: ignore[attr-defined]
        done = h.engine.resume(h.invoker.invoked.pop(), budget_seconds=5, remaining_seconds=5)  # type: ignore[attr-defined]
        assert done is not None and done.status is TurnStatus.FINISHED
        assert len(seen.contexts) == 1 and len(events(h, out.turn_id, "handed_off")) == 1


def test_a_call_that_fits_runs_in_the_request() -> None:
    seen = Seen()
    with scenario(agent("shop", [seen.tool(timeout=5)], ALLOW), model=charge_script(), inline=False) as h:
        out = h.engine.send_message("shop", "go", budget_seconds=25, remaining_seconds=15)
        assert out.status is TurnStatus.FINISHED and len(seen.contexts) == 1
        assert events(h, out.turn_id, "handed_off") == []
