"""The shipped customer-service agent: tools, schemas and rules as DESIGN.md fixes them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loopengine.app.request.resolution import Decider
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.registry import AgentRegistry
from loopengine.authoring.tools import result_text
from loopengine.domain.decisions import Approval
from loopengine.domain.gate import Decision
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel
from tests.scenario import assert_protocol, results, scenario

NAME = "customer-service"


@pytest.fixture(scope="module")
def registry() -> AgentRegistry:
    return AgentRegistry()


@pytest.fixture(scope="module")
def cfg(registry: AgentRegistry) -> AgentConfig:
    return registry.get(NAME)


def test_it_is_found_by_its_route_name(registry: AgentRegistry) -> None:
    assert NAME in registry.names()


def test_tools_and_schemas(cfg: AgentConfig) -> None:
    assert [t.name for t in cfg.tools] == ["lookup_order", "issue_refund", "send_email"]
    schemas = {t.name: t.input_schema for t in cfg.tools}
    assert schemas["lookup_order"]["required"] == ["order_id"]
    assert schemas["lookup_order"]["properties"]["order_id"]["type"] == "string"
    refund = schemas["issue_refund"]
    assert sorted(refund["required"]) == ["amount", "order_id", "reason"]
    assert refund["properties"]["amount"]["type"] == "number"
    assert refund["properties"]["order_id"]["type"] == refund["properties"]["reason"]["type"] == "string"
    email = schemas["send_email"]
    assert sorted(email["required"]) == ["body", "intent", "to"]
    assert set(email["properties"]) == {"to", "subject", "body", "intent"}
    assert email["properties"]["intent"]["enum"] == ["tracking_info", "refund", "other"]
    assert "reviewer" in email["properties"]["intent"]["description"]
    # the model is offered the three tools plus the built-in question tool
    assert [s["name"] for s in cfg.tool_specs()] == [
        "lookup_order",
        "issue_refund",
        "send_email",
        "system_ask_user",
    ]


@pytest.mark.parametrize(
    ("tool", "args", "decision"),
    [
        ("lookup_order", {"order_id": "A-1001"}, Decision.ALLOW),
        ("send_email", {"to": "a@example.com", "body": "b", "intent": "tracking_info"}, Decision.ALLOW),
        ("send_email", {"to": "a@example.com", "body": "b", "intent": "refund"}, Decision.ASK),
        ("send_email", {"to": "a@example.com", "body": "b", "intent": "other"}, Decision.ASK),
        ("send_email", {"to": "a@example.com", "body": "tracking_info"}, Decision.ASK),
        ("send_email", {"to": "a@example.com", "body": "b", "intent": ["tracking_info"]}, Decision.ASK),
        ("issue_refund", {"order_id": "A-1001", "amount": 212.0, "reason": "broken"}, Decision.ASK),
        ("issue_refund", {"order_id": "A-1001", "amount": 0.01, "reason": "x"}, Decision.ASK),
        ("delete_everything", {}, Decision.ASK),
    ],
)
def test_rules(cfg: AgentConfig, tool: str, args: dict[str, Any], decision: Decision) -> None:
    assert cfg.rules.evaluate(tool, args).decision is decision
    assert cfg.rules.default_decision is Decision.ASK


def test_lookup_order_returns_the_fixture(cfg: AgentConfig) -> None:
    lookup = cfg.tool("lookup_order")
    assert lookup is not None

    order = json.loads(result_text(lookup.execute({"order_id": "A-1001"})))

    assert order["status"] == "delivered"
    assert order["issue"] == "arrived broken"
    assert order["total"] == 212.00
    assert order["currency"] == "USD"
    assert order["customer"] == "a@example.com"
    missing = lookup.execute({"order_id": "Z-0000"})
    assert "error" in missing


def test_issue_refund_and_send_email_shapes(cfg: AgentConfig) -> None:
    refund_tool, email_tool = cfg.tool("issue_refund"), cfg.tool("send_email")
    assert refund_tool is not None and email_tool is not None

    refund = refund_tool.execute({"order_id": "A-1001", "amount": 212.0, "reason": "broken"})
    sent = email_tool.execute({"to": "a@example.com", "body": "hi", "intent": "refund"})

    assert set(refund) == {"refund_id", "order_id", "amount", "status"}
    assert (refund["order_id"], refund["amount"], refund["status"]) == ("A-1001", 212.0, "issued")
    assert sent["status"] == "sent" and sent["to"] == "a@example.com"


def test_offline_script_end_to_end(registry: AgentRegistry, cfg: AgentConfig) -> None:
    """The broken-order story on the engine: lookup runs, the refund and its email each ask."""
    script = registry.script(NAME)
    assert script is not None
    model = ScriptedModel(script)
    with scenario(cfg, model=model) as h:
        out = h.engine.send_message(NAME, "Order A-1001 arrived broken, please refund it.")

        assert out.stop_reason is StopReason.PENDING_APPROVAL
        (refund,) = out.pending
        assert refund.tool == "issue_refund" and refund.args["amount"] == 212.0
        h.engine.resolve(refund.pending_id, Approval(), Decider("ops@example.com"))
        again = h.engine.outcome(out.turn_id)
        (email,) = again.pending
        assert email.tool == "send_email" and email.args["intent"] == "refund"
        h.engine.resolve(email.pending_id, Approval(), Decider("ops@example.com"))

        done = h.engine.outcome(out.turn_id)
        assert done.status is TurnStatus.FINISHED and done.stop_reason is StopReason.END_TURN
        assert done.text is not None and "refunded" in done.text
        msgs = assert_protocol(h, out.session_id)
        looked_up = results(msgs[2])
        assert next(iter(looked_up.values()))["customer"] == "a@example.com"


def test_offline_script_tracking_email_needs_nobody(registry: AgentRegistry, cfg: AgentConfig) -> None:
    script = registry.script(NAME)
    assert script is not None
    with scenario(cfg, model=ScriptedModel(script)) as h:
        out = h.engine.send_message(NAME, "Where is my order A-1002?")

        assert out.status is TurnStatus.FINISHED and out.stop_reason is StopReason.END_TURN
        assert out.text is not None and "tracking" in out.text
        assert_protocol(h, out.session_id)
