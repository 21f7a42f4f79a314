"""MCP servers under the same rules, against a real MCP server (tests/mcp_support.py), really wired.

The engine is built by ``build_engine`` (the composition root: the registry wrapped to list MCP
servers at turn start, the streamable-HTTP client), on SQLite, with the agent folder's offline
script as the model. The server is the ``mcp`` SDK's own, on a loopback port, checking the bearer
token and counting what runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.app.engine import Engine
from loopengine.app.invokers import RecordingInvoker
from loopengine.app.request.resolution import Decider
from loopengine.authoring.mcp import GRACE
from loopengine.authoring.registry import AgentRegistry
from loopengine.authoring.tools import args_hash
from loopengine.bootstrap import build_engine
from loopengine.domain.base.errors import AgentUnavailable, Conflict, Forbidden, InvalidInput
from loopengine.domain.decisions import Approval, Denial
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.http import api
from loopengine.http.functions import resume
from tests.handler_support import FakeContext, InstallRoot, call, lambda_context, load_event, with_body
from tests.mcp_support import RULES, TOKEN, BillingServer, write_billing_agent

# One pytest-xdist worker runs them all: one imports the mcp package and starts the billing server
pytestmark = pytest.mark.xdist_group("mcp")

ALICE = Decider("user:alice", "test")
BOB = Decider("user:bob", "test")
CHARGE = {"amount": 12.5, "currency": "USD"}
Make = Callable[..., Engine]


@pytest.fixture
def billing() -> Iterator[BillingServer]:
    server = BillingServer().start()
    yield server
    server.stop()


@pytest.fixture
def agents(tmp_path: Path, billing: BillingServer) -> Path:
    write_billing_agent(tmp_path / "agents", billing.url)
    return tmp_path / "agents"


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Make]:
    """``make(agents, **env)``: an engine as a deployment builds it, on one SQLite file per test."""
    built: list[Engine] = []

    def build(agents: Path, **extra: str) -> Engine:
        env = {
            "LOOPENGINE_DB": str(tmp_path / "mcp.db"),
            "LOOPENGINE_MODEL": "scripted",
            "BILLING_TOKEN": TOKEN,
        }
        env.update(extra)
        engine = build_engine({k: v for k, v in env.items() if v}, registry=AgentRegistry(None, [agents]))
        built.append(engine)
        return engine

    yield build
    for engine in built:
        engine.rt.stores.close()


def answer(engine: Engine, turn_id: str) -> Any:
    """What the script said the call answered (JSON when it is)."""
    text = engine.outcome(turn_id).text or ""
    assert text.startswith("answer: "), text
    body = text.removeprefix("answer: ")
    try:
        return json.loads(body)
    except ValueError:
        return body


def outcomes(engine: Engine, turn_id: str) -> list[str | None]:
    return [c.outcome for c in engine.rt.stores.turns.calls(turn_id).values()]


def test_lookup_runs_charge_waits_and_an_approval_runs_it_once(
    agents: Path, billing: BillingServer, make: Make
) -> None:
    engine = make(agents)
    done = engine.send_message("billing-desk", "lookup A-1")
    assert done.status is TurnStatus.FINISHED
    assert answer(engine, done.turn_id) == {"order_id": "A-1", "status": "delivered"}

    paused = engine.send_message("billing-desk", "charge 12.5 USD")
    assert paused.status is TurnStatus.PAUSED and billing.count("charge") == 0
    item = paused.pending[0]
    assert (item.tool, item.args, item.kind) == ("billing_charge", CHARGE, "approval")
    assert item.args_hash == args_hash("billing_charge", CHARGE)

    with pytest.raises(Conflict):  # the approval binds to server, tool and arguments
        engine.resolve(item.pending_id, Approval(args_hash=args_hash("charge", CHARGE)), ALICE)
    assert billing.count("charge") == 0

    engine.resolve(item.pending_id, Approval(args_hash=item.args_hash), ALICE)
    assert billing.executed[-1] == ("charge", CHARGE)
    assert answer(engine, paused.turn_id)["charge_id"] == "ch_2"
    assert engine.resolve(item.pending_id, Approval(), ALICE).already_resolved
    assert billing.count("charge") == 1 and billing.methods.count("tools/call") == 2
    decided = [e for e in engine.audit(paused.turn_id) if e.get("decidedBy") == "user:alice"]
    assert decided, engine.audit(paused.turn_id)


def test_a_denied_call_never_reaches_the_server(agents: Path, billing: BillingServer, make: Make) -> None:
    engine = make(agents)
    paused = engine.send_message("billing-desk", "charge 12.5 USD")
    engine.resolve(paused.pending[0].pending_id, Denial(comment="not today"), ALICE)
    out = engine.outcome(paused.turn_id)
    assert (out.status, out.stop_reason) == (TurnStatus.FINISHED, StopReason.DENIED)
    assert billing.count("charge") == 0 and "tools/call" not in billing.methods


def test_edited_arguments_are_checked_against_the_servers_schema(
    agents: Path, billing: BillingServer, make: Make
) -> None:
    engine = make(agents)
    paused = engine.send_message("billing-desk", "charge 12.5 USD")
    pending = paused.pending[0].pending_id
    with pytest.raises(InvalidInput, match="amount"):
        engine.resolve(pending, Approval(edited_args={"amount": "lots", "currency": "USD"}), ALICE)
    with pytest.raises(InvalidInput, match="currency"):
        engine.resolve(pending, Approval(edited_args={"amount": 3}), ALICE)
    assert billing.count("charge") == 0
    engine.resolve(pending, Approval(edited_args={"amount": 3, "currency": "EUR"}), ALICE)
    assert billing.executed == [("charge", {"amount": 3.0, "currency": "EUR"})]
    assert answer(engine, paused.turn_id)["reviewer_edited_args"] == {"amount": 3, "currency": "EUR"}


def test_approvers_of_a_rule_apply_to_an_mcp_tool(tmp_path: Path, billing: BillingServer, make: Make) -> None:
    rules = RULES.replace("  - tool: billing_charge\n    decision: ask\n", "")
    rules = rules.replace(
        "rules:\n", "rules:\n  - tool: billing_charge\n    decision: ask\n    approvers: [bob]\n"
    )
    write_billing_agent(tmp_path / "agents", billing.url, rules=rules)
    engine = make(tmp_path / "agents")
    paused = engine.send_message("billing-desk", "charge 12.5 USD")
    with pytest.raises(Forbidden):
        engine.resolve(paused.pending[0].pending_id, Approval(), ALICE)
    assert billing.count("charge") == 0
    engine.resolve(paused.pending[0].pending_id, Approval(), BOB)
    assert billing.count("charge") == 1


def test_the_allow_list_hides_tools_and_the_prefix_names_them(
    tmp_path: Path, billing: BillingServer, make: Make
) -> None:
    rules = "rules:\n  - tool: pay_lookup\n    decision: allow\ndefault_decision: allow\n"
    extra = "    tools: [lookup]\n    prefix: pay\n"
    write_billing_agent(tmp_path / "agents", billing.url, extra=extra, prefix="pay", rules=rules)
    engine = make(tmp_path / "agents")
    assert [t.name for t in engine.rt.agents.get("billing-desk").tools] == ["pay_lookup"]

    done = engine.send_message("billing-desk", "lookup A-7")
    assert answer(engine, done.turn_id) == {"order_id": "A-7", "status": "delivered"}
    for message in ("charge 1 USD", "call refund"):  # allowed by the rules, but not on the allow-list
        out = engine.send_message("billing-desk", message)
        assert "unknown tool" in answer(engine, out.turn_id)["error"]
    assert [name for name, _ in billing.executed] == ["lookup"]


def test_a_server_down_at_call_time_is_a_recorded_not_run(
    agents: Path, billing: BillingServer, make: Make
) -> None:
    engine = make(agents)
    paused = engine.send_message("billing-desk", "charge 12.5 USD")
    billing.stop()
    engine.resolve(paused.pending[0].pending_id, Approval(), ALICE)
    out = engine.outcome(paused.turn_id)
    assert (out.status, out.stop_reason, out.pending) == (TurnStatus.FINISHED, StopReason.END_TURN, [])
    assert "billing server unreachable: not run" in answer(engine, paused.turn_id)["error"]
    assert outcomes(engine, paused.turn_id) == ["error"]
    audit = [e for e in engine.audit(paused.turn_id) if e["type"] == "tool_outcome"]
    assert [(e["tool"], e["outcome"]) for e in audit] == [("billing_charge", "error")]
    assert billing.count("charge") == 0


def test_a_tool_changed_while_the_turn_waited_is_not_run(
    agents: Path, billing: BillingServer, make: Make
) -> None:
    engine = make(agents)
    paused = engine.send_message("billing-desk", "charge 12.5 USD")
    billing.change_charge()
    engine.resolve(paused.pending[0].pending_id, Approval(), ALICE)
    said = answer(engine, paused.turn_id)["error"]
    assert "the billing server's charge tool changed since this turn started; not run" in said
    assert outcomes(engine, paused.turn_id) == ["error"] and billing.executed == []
    assert "tools/call" not in billing.methods
    fresh = engine.send_message("billing-desk", "charge 12.5 USD")  # a new turn lists the new schema
    assert "'amount_cents' is a required property" in answer(engine, fresh.turn_id)["error"]
    assert billing.executed == []


def test_a_call_sent_with_no_answer_is_unknown_and_never_sent_again(
    tmp_path: Path, billing: BillingServer, make: Make
) -> None:
    write_billing_agent(
        tmp_path / "agents", billing.url, extra="    tools: [charge, lookup]\n    timeout: 1\n"
    )
    engine = make(tmp_path / "agents")
    assert engine.rt.agents.get("billing-desk").timeout_of("billing_charge") == 1 + GRACE
    billing.delay = 3.0
    paused = engine.send_message("billing-desk", "charge 12.5 USD")
    engine.resolve(paused.pending[0].pending_id, Approval(), ALICE)
    said = answer(engine, paused.turn_id)
    assert said["status"] == "unknown" and "no answer came back" in said["reason"]
    assert outcomes(engine, paused.turn_id) == ["unknown"]
    assert (
        engine.resume(paused.turn_id) is None or engine.outcome(paused.turn_id).status is TurnStatus.FINISHED
    )
    assert billing.count("charge") == 1 and billing.methods.count("tools/call") == 1


def test_the_pinned_tools_survive_a_restart_without_a_new_listing(
    agents: Path, billing: BillingServer, make: Make
) -> None:
    first = make(agents)
    paused = first.send_message("billing-desk", "charge 12.5 USD")
    snapshot = first.rt.stores.turns.get_config(first.turn(paused.turn_id).config_hash)
    assert snapshot is not None
    entry = next(t for t in snapshot["tools"] if t["name"] == "billing_charge")
    listed = first.rt.agents.get("billing-desk").mcp_pins["billing_charge"]
    assert entry["mcp"] == {"server": "billing", "tool": "charge", "schemaHash": listed.schema_hash}
    assert snapshot["mcp_servers"][0]["headers_env"] == {"Authorization": "BILLING_TOKEN"}
    first.rt.stores.close()

    # publish a config whose server is gone: the parked turn keeps the one it started with
    write_billing_agent(agents, "http://127.0.0.1:9/mcp")
    second = make(agents)
    seen = len(billing.methods)
    second.resolve(paused.pending[0].pending_id, Approval(), ALICE)
    assert answer(second, paused.turn_id)["charge_id"] == "ch_1"
    assert billing.methods[seen:].count("tools/list") == 1, (
        "listed once: the pin's check in the call's session"
    )
    assert billing.methods[seen:].count("tools/call") == 1
    with pytest.raises(AgentUnavailable, match="billing MCP server is unreachable"):
        second.send_message("billing-desk", "charge 1 USD")  # a new turn lists the published config


def test_a_server_down_at_turn_start_refuses_the_message(
    agents: Path, billing: BillingServer, make: Make
) -> None:
    engine = make(agents)
    billing.stop()
    with pytest.raises(AgentUnavailable, match="billing MCP server is unreachable"):
        engine.send_message("billing-desk", "lookup A-1")


def test_the_header_secret_stays_out_of_logs_audit_and_storage(
    tmp_path: Path, agents: Path, billing: BillingServer, make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    engine = make(agents)
    paused = engine.send_message("billing-desk", "charge 12.5 USD")
    engine.resolve(paused.pending[0].pending_id, Approval(), ALICE)
    assert billing.count("charge") == 1 and billing.refused == 0  # the token reached the server
    with pytest.raises(AgentUnavailable) as wrong:
        make(agents, BILLING_TOKEN="Bearer wrong-token-4d1c9e7a").send_message("billing-desk", "lookup A-1")
    assert billing.refused > 0 and "wrong-token-4d1c9e7a" not in str(wrong.value)
    with pytest.raises(AgentUnavailable, match="BILLING_TOKEN, which is not set"):
        make(agents, BILLING_TOKEN="").send_message("billing-desk", "lookup A-1")

    secret = TOKEN.split()[1]
    assert secret not in caplog.text and "wrong-token" not in caplog.text
    assert secret not in json.dumps(engine.audit(paused.turn_id))
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("mcp.db*"))
    assert stored and secret.encode() not in stored


def test_a_server_echoing_the_token_has_it_scrubbed(agents: Path, billing: BillingServer, make: Make) -> None:
    secret = TOKEN.split()[1]

    def echo(order_id: str) -> str:
        return f"order {order_id}; you sent {TOKEN}; bare {secret}"

    billing.mcp.remove_tool("lookup")
    billing.mcp.add_tool(echo, name="lookup", description="Look up an order by its id.")
    engine = make(agents)
    done = engine.send_message("billing-desk", "lookup A-1")
    said = answer(engine, done.turn_id)
    assert said == "order A-1; you sent [redacted]; bare [redacted]"


def test_through_the_api_handler_an_mcp_call_pauses_resumes_and_a_down_server_is_503(
    install_root: InstallRoot, tmp_path: Path, billing: BillingServer
) -> None:
    write_billing_agent(tmp_path / "agents", billing.url)
    engine = install_root(
        lambda _e: RecordingInvoker(), LOOPENGINE_AGENTS_PATH=str(tmp_path / "agents"), BILLING_TOKEN=TOKEN
    )
    post = with_body(
        load_event("post_message", **{"customer-service": "billing-desk"}), {"message": "charge 12.5 USD"}
    )
    status, paused = call(api.handler, post)
    assert status == 202 and paused["stopReason"] == "pending_approval"
    (item,) = paused["pendingItems"]
    assert (item["tool"], item["args"], item["argsHash"]) == (
        "billing_charge",
        CHARGE,
        args_hash("billing_charge", CHARGE),
    )
    # the inbox names the call's server and the server's own name for the tool; an agent's own tool has none
    status, page = call(api.handler, load_event("inbox", **{"customer-service": "billing-desk"}))
    assert status == 200 and 'data-kind="approval"' in page["html"]
    assert "on MCP server <code>billing</code>" in page["html"], page["html"]
    assert "<code>billing</code> (its tool <code>charge</code>)" in page["html"]
    mine = with_body(load_event("post_message"), {"message": "Order A-1001 arrived broken."})
    assert call(api.handler, mine)[0] == 202
    status, page = call(api.handler, load_event("inbox"))
    assert "<code>issue_refund</code>" in page["html"] and "MCP server" not in page["html"]

    event = with_body(
        load_event("resolve_approve", pendingId=item["pendingId"]),
        {"decision": "approve", "argsHash": item["argsHash"]},
    )
    assert call(api.handler, event)[0] == 202 and billing.count("charge") == 0  # the resume worker runs it
    invoker = engine.rt.invoker
    assert isinstance(invoker, RecordingInvoker)
    while invoker.invoked:
        resume.handler(load_event("resume", turnId=invoker.invoked.pop(0)), lambda_context(FakeContext()))
    assert billing.count("charge") == 1 and engine.outcome(paused["turnId"]).status is TurnStatus.FINISHED

    billing.stop()
    status, body = call(api.handler, post)
    assert status == 503 and body["error"] == "agent_unavailable"
    assert "the billing MCP server is unreachable" in body["message"] and TOKEN not in body["message"]
