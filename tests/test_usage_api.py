"""Usage through the HTTP API: on each model_response event, on the turn, the session and the tenant's day.

The model is the anthropic SDK against :class:`tests.window_standin.WindowedMessagesApi`, which bills
each call as the API does; the figures read back must be exactly what it billed, counted once, in
the tenant that used them, and visible only to that tenant's principals (and the operator).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from loopengine.domain.tokens.metering import day_of
from loopengine.http import api
from loopengine.local.dev import LocalContext, to_event
from loopengine.models.anthropic import AnthropicModel
from tests.handler_support import lambda_context
from tests.harness import Build, Calls, Harness, agent
from tests.window_standin import WindowedMessagesApi

pytestmark = pytest.mark.xdist_group("anthropic-sdk")

USERS = [
    {"user": "alice", "password": "a-pw", "tenants": ["acme"]},
    {"user": "bob", "password": "b-pw", "tenants": ["globex"]},
]
BASIC = {"operator": "admin:secret", "alice": "alice:a-pw", "bob": "bob:b-pw"}
RULES = {"rules": [{"tool": "lookup", "decision": "allow"}], "default_decision": "ask"}
COUNTS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def brain(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Look up, then ask to refund (a pause), then say it is done."""
    done = [b["tool_use_id"] for m in body["messages"] for b in m["content"] if b["type"] == "tool_result"]
    last_text = [b for b in body["messages"][-1]["content"] if b["type"] == "text"]
    if last_text:  # a new user message
        return [
            {"type": "tool_use", "id": f"toolu_l{len(body['messages'])}", "name": "lookup", "input": {"x": 1}}
        ], "tool_use"
    if done[-1].startswith("toolu_l"):
        return [
            {"type": "tool_use", "id": f"toolu_r{len(body['messages'])}", "name": "refund", "input": {"x": 2}}
        ], "tool_use"
    return [{"type": "text", "text": "The refund is on its way."}], "end_turn"


def call(method: str, path: str, caller: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    headers = {"content-type": "application/json"}
    headers["authorization"] = "Basic " + base64.b64encode(BASIC[caller].encode()).decode()
    raw = b"" if body is None else json.dumps(body).encode()
    result = api.handler(to_event(method, path, headers, raw, "127.0.0.1"), lambda_context(LocalContext()))
    return int(result["statusCode"]), json.loads(result["body"] or "{}")


@pytest.fixture
def world(
    install_harness: Build, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Harness, WindowedMessagesApi]]:
    monkeypatch.setenv("LOOPENGINE_USERS", json.dumps(USERS))
    stand_in = WindowedMessagesApi(200_000, brain)
    client = stand_in.client()
    calls = Calls()
    h = install_harness(
        agent("shop", [calls.tool("lookup"), calls.tool("refund")], RULES), model=AnthropicModel(client)
    )
    yield h, stand_in
    client.close()


def _billed(stand_in: WindowedMessagesApi, calls: slice) -> dict[str, int]:
    used = stand_in.usage[calls]
    return {**{k: sum(u.get(k, 0) for u in used) for k in COUNTS}, "modelCalls": len(used)}


def test_usage_is_on_each_call_the_turn_the_session_and_the_tenants_day(
    world: tuple[Harness, WindowedMessagesApi],
) -> None:
    h, stand_in = world
    status, paused = call("POST", "/agents/shop/messages", "alice", {"message": "refund my order"})
    assert status == 202 and paused["status"] == "paused"
    turn_id, session_id = paused["turnId"], paused["sessionId"]
    _, turn = call("GET", f"/turns/{turn_id}", "alice")
    assert turn["usage"] == _billed(stand_in, slice(0, 2))
    responses = [e for e in turn["audit"] if e["type"] == "model_response"]
    assert [r["usage"] for r in responses] == [{**dict.fromkeys(COUNTS, 0), **u} for u in stand_in.usage]
    today = day_of(h.clock.now())
    _, days = call("GET", "/usage", "alice")
    assert days == {"items": [{"tenant": "acme", "agent": "shop", "day": today, "usage": turn["usage"]}]}

    pending = paused["pendingItems"][0]["pendingId"]
    assert call("POST", f"/pending-approvals/{pending}/resolve", "alice", {"decision": "approve"})[0] == 202
    status, again = call(
        "POST", "/agents/shop/messages", "alice", {"message": "and again", "sessionId": session_id}
    )
    assert status == 202
    assert (
        call(
            "POST",
            f"/pending-approvals/{again['pendingItems'][0]['pendingId']}/resolve",
            "alice",
            {"decision": "approve"},
        )[0]
        == 202
    )

    _, first = call("GET", f"/turns/{turn_id}", "alice")
    assert first["status"] == "finished" and first["usage"] == _billed(stand_in, slice(0, 3))
    _, session = call("GET", f"/sessions/{session_id}", "alice")
    assert session["usage"] == _billed(stand_in, slice(0, 6)) and session["compactions"] == []
    _, days = call("GET", f"/usage?agent=shop&day={today}", "alice")
    assert days["items"][0]["usage"] == _billed(stand_in, slice(0, 6)), "each call counted once"


def test_a_principal_sees_only_its_own_tenants_usage(world: tuple[Harness, WindowedMessagesApi]) -> None:
    h, stand_in = world
    assert call("POST", "/agents/shop/messages", "alice", {"message": "refund my order"})[0] == 202
    today = day_of(h.clock.now())
    mine = {
        "items": [{"tenant": "acme", "agent": "shop", "day": today, "usage": _billed(stand_in, slice(0, 2))}]
    }
    assert call("GET", "/usage?tenant=acme", "alice") == (200, mine)
    assert call("GET", "/usage?tenant=acme", "bob")[0] == 403
    assert call("GET", "/usage", "bob") == (200, {"items": []})
    assert call("GET", "/usage?tenant=acme", "operator") == (200, mine)
    assert call("GET", "/usage?day=2027-13-01", "alice")[0] == 400
    assert call("GET", "/usage?day=1999-01-01", "alice") == (200, {"items": []})
