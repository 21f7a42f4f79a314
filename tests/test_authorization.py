"""Who may do what: every route x every kind of caller, with no state change on any refusal.

Callers: nobody, the operator (``LOOPENGINE_ADMIN_AUTH``), a tenant-A user who is not an approver,
a tenant-B user, a tenant-A approver (group ``refund-managers``), and the recipient of another
item's magic link (whose token is no credential for the API). The world: a turn in tenant ``acme``
parked on a refund that only ``group:refund-managers`` may approve.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from loopengine.app.ports import ModelRequest, ModelResponse
from loopengine.domain.messages import Message
from loopengine.http import api, auth
from loopengine.local.dev import LocalContext, to_event
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.harness import Build, Calls, Harness, agent

USERS = [
    {"user": "alice", "password": "a-pw", "tenants": ["acme"]},
    {"user": "bob", "password": "b-pw", "tenants": ["globex"]},
    {"user": "mgr", "password": "m-pw", "tenants": ["acme"], "groups": ["refund-managers"]},
]
CALLERS: dict[str, str | None] = {
    "none": None,
    "operator": "admin:secret",
    "tenant_a": "alice:a-pw",
    "tenant_b": "bob:b-pw",
    "approver": "mgr:m-pw",
    "magic_other": "bearer",
}
RULES = {
    "rules": [
        {"tool": "lookup", "decision": "allow"},
        {
            "tool": "refund",
            "when": {"field": "amount", "op": "gt", "value": 1000},
            "decision": "ask",
            "approvers": ["group:refund-managers"],
        },
        {"tool": "refund", "decision": "ask"},
    ],
    "default_decision": "ask",
}


def respond(request: ModelRequest) -> ModelResponse:
    """Every new user message asks for a refund of 5000; a tool result gets a closing line."""
    last = request.messages[-1]
    if last.tool_results and not last.text:
        return say("done")
    amount = 10 if "small" in (last.text or "") else 5000
    return call(use("refund", {"amount": amount}))


@pytest.fixture
def world(install_harness: Build, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("LOOPENGINE_USERS", json.dumps(USERS))
    calls = Calls()
    amount = {"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}
    tools = [calls.tool("lookup"), calls.tool("refund", schema=amount)]
    h = install_harness(agent("shop", tools, RULES), model=ScriptedModel(respond))
    status, paused = request(
        "POST", "/agents/shop/messages", {"message": "refund please", "tenant": "acme"}, "operator"
    )
    assert status == 202, paused
    yield {
        "h": h,
        "calls": calls,
        "turn": paused["turnId"],
        "session": paused["sessionId"],
        "pending": paused["pendingItems"][0]["pendingId"],
    }


def request(method: str, path: str, body: Any, caller: str) -> tuple[int, dict[str, Any]]:
    """Send one request through the api handler as ``caller`` (a real API Gateway v2 event)."""
    headers = {"content-type": "application/json"}
    secret = CALLERS[caller]
    if secret == "bearer":
        headers["authorization"] = "Bearer x.y"  # a magic-link token is no API credential
    elif secret is not None:
        headers["authorization"] = "Basic " + base64.b64encode(secret.encode()).decode()
    raw = b"" if body is None else json.dumps(body).encode()
    result = api.handler(to_event(method, path, headers, raw, "127.0.0.1"), LocalContext())
    text = result["body"] or "{}"
    return int(result["statusCode"]), json.loads(text) if text.startswith("{") else {"html": text}


def dump(h: Harness) -> list[Any]:
    """Every row of every table: a refused request must change none of them."""
    conn = h.rt.stores.sessions.db.connection()  # type: ignore[attr-defined]
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return [(t, conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()) for t in tables]


ROUTES = {
    "message_new": ("POST", "/agents/shop/messages", {"message": "hi", "tenant": "acme"}),
    "message_session": ("POST", "/agents/shop/messages", {"message": "hi", "sessionId": "{session}"}),
    "resolve": ("POST", "/pending-approvals/{pending}/resolve", {"decision": "approve"}),
    "deny": ("POST", "/pending-approvals/{pending}/resolve", {"decision": "deny"}),
    "list_acme": ("GET", "/pending-approvals?tenant=acme", None),
    "turn": ("GET", "/turns/{turn}", None),
    "cancel": ("POST", "/turns/{turn}/cancel", None),
    "session": ("GET", "/sessions/{session}", None),
    "health": ("GET", "/health", None),
}
#                 none operator tenant_a tenant_b approver magic_other
EXPECTED = {
    "message_new": (401, 202, 202, 403, 202, 401),
    "message_session": (401, 202, 403, 404, 202, 401),  # tenant_a may not supersede an approvers-only wait
    "resolve": (401, 403, 403, 404, 202, 401),  # the operator is no approver of a rule that names them
    "deny": (401, 403, 403, 404, 200, 401),
    "list_acme": (401, 200, 200, 403, 200, 401),
    "turn": (401, 200, 200, 404, 200, 401),
    "cancel": (401, 200, 403, 404, 200, 401),
    "session": (401, 200, 200, 404, 200, 401),
    "health": (200, 200, 200, 200, 200, 200),
}
CASES = [(route, caller) for route in ROUTES for caller in CALLERS]


@pytest.mark.parametrize(("route", "caller"), CASES, ids=[f"{r}-{c}" for r, c in CASES])
def test_the_authorization_matrix(world: dict[str, Any], route: str, caller: str) -> None:
    method, path, body = ROUTES[route]
    path = path.format(**world)
    if body is not None:
        body = {k: (v.format(**world) if isinstance(v, str) else v) for k, v in body.items()}
    expected = EXPECTED[route][list(CALLERS).index(caller)]
    before = dump(world["h"])

    status, reply = request(method, path, body, caller)

    assert status == expected, reply
    if status >= 400:
        assert set(reply) >= {"error", "message"}
        assert dump(world["h"]) == before, "a refused request changed the store"
        assert world["calls"].count("refund") == 0


def test_every_route_but_the_public_ones_answers_401_without_credentials(world: dict[str, Any]) -> None:
    routes = [*api.app._static_routes, *api.app._dynamic_routes]
    assert len(routes) >= 10
    checked = []
    for route in routes:
        path = route.path.replace("<agent>", "shop").replace("<pendingId>", world["pending"])
        path = path.replace("<turnId>", world["turn"]).replace("<sessionId>", world["session"])
        path = path.replace("<token>", "x.y")
        status, _ = request(route.method, path, {"message": "hi"} if route.method == "POST" else None, "none")
        if auth.is_public(path):
            assert status != 401 or route.path.startswith("/integrations/"), (route.method, route.path)
        else:
            assert status == 401, (route.method, route.path, status)
            checked.append(f"{route.method} {route.path}")
    assert len(checked) >= 7, checked


def test_the_pending_list_shows_each_caller_only_their_tenants(world: dict[str, Any]) -> None:
    def ids(caller: str, query: str = "") -> list[str]:
        status, body = request("GET", "/pending-approvals" + query, None, caller)
        assert status == 200, body
        return [i["pendingId"] for i in body["items"]]

    assert ids("tenant_a") == ids("approver") == ids("operator", "?tenant=acme") == [world["pending"]]
    assert ids("tenant_b") == []
    assert ids("operator") == []  # the operator names a tenant; without one, the default tenant


def test_a_scoped_caller_who_names_no_tenant_gets_theirs(world: dict[str, Any]) -> None:
    status, body = request("POST", "/agents/shop/messages", {"message": "small refund"}, "tenant_b")
    assert status == 202, body
    turn = world["h"].engine.turn(body["turnId"])
    assert turn.tenant == "globex"


def test_an_edit_cannot_move_a_call_past_its_approvers(world: dict[str, Any]) -> None:
    h = world["h"]
    status, small = request("POST", "/agents/shop/messages", {"message": "small refund"}, "tenant_a")
    assert status == 202 and small["pendingItems"][0]["args"] == {"amount": 10}
    pending = small["pendingItems"][0]["pendingId"]
    before = dump(h)
    edit = {"decision": "approve", "editedArgs": {"amount": 9000}}

    status, reply = request("POST", f"/pending-approvals/{pending}/resolve", edit, "tenant_a")

    assert status == 403 and reply["error"] == "forbidden", reply
    assert dump(h) == before and world["calls"].count("refund") == 0
    status, reply = request("POST", f"/pending-approvals/{pending}/resolve", edit, "approver")
    assert status == 202, reply
    assert world["calls"].log == [("refund", {"amount": 9000})]


def test_a_jwt_whose_sub_is_a_group_name_is_not_that_group(world: dict[str, Any]) -> None:
    def as_jwt(claims: dict[str, Any]) -> int:
        event = to_event(
            "POST", f"/pending-approvals/{world['pending']}/resolve", {}, b'{"decision": "approve"}', "::1"
        )
        event["requestContext"]["authorizer"] = {"jwt": {"claims": claims, "scopes": None}}
        return int(api.handler(event, LocalContext())["statusCode"])

    assert as_jwt({"sub": "refund-managers", "tenant": "acme"}) == 403
    assert as_jwt({"sub": "eve", "tenant": "acme", "cognito:groups": "[support]"}) == 403
    assert as_jwt({"sub": "carol", "tenant": "globex", "cognito:groups": "[refund-managers]"}) == 404
    assert world["calls"].count("refund") == 0
    assert as_jwt({"sub": "carol", "tenant": "acme", "cognito:groups": "[refund-managers]"}) == 202
    assert world["calls"].count("refund") == 1
    history = world["h"].rt.stores.sessions.load(world["session"])
    assert isinstance(history[-1], Message) and history[-1].text == "done"
