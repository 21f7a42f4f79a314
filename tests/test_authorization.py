"""Who may do what: every route x every source of a principal, with no state change on any refusal.

Callers: nobody; the operator (``LOOPENGINE_ADMIN_AUTH``); HTTP Basic users of tenant A (no approver),
tenant B, and a tenant-A approver (group ``refund-managers``); the holder of another item's magic
link (whose token is no API credential); JWT holders in the shapes API Gateway hands over (Cognito's
``custom:tenant`` named by ``LOOPENGINE_JWT_TENANT_CLAIM``, a required scope, list and string
claims, a ``sub`` that looks like a group) and tokens that must be refused (no tenant claim, the
tenant in another claim than the configured one, a missing scope); and Slack and Lark, whose signed
requests are credentials for their own routes only. The world: a turn in tenant ``acme`` parked on a
refund that only ``group:refund-managers`` may approve; the Slack user, the Lark user and the
magic-link recipient are all *named* ``group:refund-managers``, which makes none of them that group.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from loopengine.app.ports import ModelRequest, ModelResponse
from loopengine.channels.lark import routes as lark_route
from loopengine.channels.magic import token as magic
from loopengine.channels.slack import routes as slack_route
from loopengine.channels.slack.interact import sign_slack
from loopengine.domain.base.ids import session_key
from loopengine.domain.messages import Message
from loopengine.http import api, auth, root
from loopengine.local.dev import LocalContext, to_event
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests import lark_support
from tests.handler_support import lambda_context
from tests.harness import Build, Calls, Harness, agent

USERS = [
    {"user": "alice", "password": "a-pw", "tenants": ["acme"]},
    {"user": "bob", "password": "b-pw", "tenants": ["globex"]},
    {"user": "mgr", "password": "m-pw", "tenants": ["acme"], "groups": ["refund-managers"]},
]
GROUPISH = "group:refund-managers"
"""What the Slack user id, the Lark open_id, the recipient and one JWT sub are named."""
ISSUER = "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_Example"
SCOPE = "loopengine/decide"
SLACK_SECRET, SLACK_TEAM = "authz-slack-signing-secret", "T0AUTHZ"
MAGIC_SECRET = "authz-magic-link-secret"


def _jwt(sub: str, **claims: Any) -> dict[str, Any]:
    return {"iss": ISSUER, "sub": sub, "token_use": "access", "scope": f"openid {SCOPE}", **claims}


JWTS: dict[str, dict[str, Any]] = {
    "jwt_a": _jwt("a-sub", **{"custom:tenant": "acme"}),
    "jwt_b": _jwt("b-sub", **{"custom:tenant": "globex"}),
    "jwt_approver": _jwt("m-sub", **{"custom:tenant": "acme", "cognito:groups": "[refund-managers other]"}),
    "jwt_lists": {
        "iss": ISSUER,
        "sub": "l-sub",
        "custom:tenant": ["acme"],
        "cognito:groups": ["refund-managers"],
        "scp": [SCOPE],
    },
    "jwt_group_sub": _jwt(GROUPISH, **{"custom:tenant": "acme"}),
    "jwt_no_tenant": _jwt("n-sub", **{"cognito:groups": "[refund-managers]"}),
    "jwt_other_claim": _jwt("o-sub", tenant="acme", **{"cognito:groups": "[refund-managers]"}),
    "jwt_no_scope": {
        **_jwt("s-sub", **{"custom:tenant": "acme", "cognito:groups": "[refund-managers]"}),
        "scope": "openid",
    },
}
BASIC = {"operator": "admin:secret", "tenant_a": "alice:a-pw", "tenant_b": "bob:b-pw", "approver": "mgr:m-pw"}
CALLERS = ["none", *BASIC, "magic_other", *JWTS, "slack", "lark"]
RULES = {
    "rules": [
        {"tool": "lookup", "decision": "allow"},
        {
            "tool": "refund",
            "when": {"field": "amount", "op": "gt", "value": 1000},
            "decision": "ask",
            "approvers": [GROUPISH],
        },
        {"tool": "refund", "decision": "ask"},
    ],
    "default_decision": "ask",
}


def respond(request: ModelRequest) -> ModelResponse:
    """Every new user message asks for a refund of 5000 ("small": 10); a tool result gets a closing line."""
    last = request.messages[-1]
    if last.tool_results and not last.text:
        return say("done")
    amount = 10 if "small" in (last.text or "") else 5000
    return call(use("refund", {"amount": amount}))


@pytest.fixture
def world(install_harness: Build, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for name, value in {
        "LOOPENGINE_USERS": json.dumps(USERS),
        "LOOPENGINE_JWT_TENANT_CLAIM": "custom:tenant",  # Cognito's custom attribute
        "LOOPENGINE_JWT_SCOPES": SCOPE,
        slack_route.SECRET_ENV: SLACK_SECRET,
        slack_route.TEAM_ENV: SLACK_TEAM,
        lark_route.APP_ID_ENV: lark_support.APP_ID,
        lark_route.TOKEN_ENV: lark_support.TOKEN,
        lark_route.ENCRYPT_KEY_ENV: lark_support.KEY,
        magic.SECRET_ENV: MAGIC_SECRET,
    }.items():
        monkeypatch.setenv(name, value)
    calls = Calls()
    amount = {"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}
    tools = [calls.tool("lookup"), calls.tool("refund", schema=amount)]
    h = install_harness(agent("shop", tools, RULES), model=ScriptedModel(respond))
    status, paused = request(
        "POST", "/agents/shop/messages", {"message": "refund please", "tenant": "acme"}, "operator"
    )
    assert status == 202, paused
    pending = paused["pendingItems"][0]["pendingId"]
    token = magic.issue_token(MAGIC_SECRET, pending, GROUPISH, h.clock.now() + 3600)
    yield {
        "h": h,
        "calls": calls,
        "turn": paused["turnId"],
        "session": paused["sessionId"],
        "pending": pending,
        "token": token,
    }


def _now() -> int:
    return int(root.engine().now())


def request(method: str, path: str, body: Any, caller: str) -> tuple[int, dict[str, Any]]:
    """Send one request through the api handler as ``caller`` (a real API Gateway v2 event)."""
    headers = {"content-type": "application/json"}
    if isinstance(body, Form):
        headers["content-type"], raw = body.content_type, body.raw
    else:
        raw = b"" if body is None else json.dumps(body).encode()
    if caller in BASIC:
        headers["authorization"] = "Basic " + base64.b64encode(BASIC[caller].encode()).decode()
    elif caller == "magic_other":
        headers["authorization"] = "Bearer x.y"  # a magic-link token is no API credential
    elif caller == "slack":
        stamp = str(_now())
        headers |= {
            "x-slack-request-timestamp": stamp,
            "x-slack-signature": sign_slack(SLACK_SECRET, raw, stamp),
        }
    elif caller == "lark":
        signed = lark_support.signed_headers(raw, lark_support.KEY, _now())
        headers |= {k.lower(): v for k, v in signed.items() if v is not None}
    event = to_event(method, path, headers, raw, "127.0.0.1")
    if caller in JWTS:
        event["requestContext"]["authorizer"] = {"jwt": {"claims": JWTS[caller], "scopes": None}}
    result = api.handler(event, lambda_context(LocalContext()))
    text = result["body"] or "{}"
    return int(result["statusCode"]), json.loads(text) if text.startswith("{") else {"html": text}


class Form:
    """A non-JSON body: Slack's form post or Lark's encrypted JSON."""

    def __init__(self, content_type: str, raw: bytes) -> None:
        self.content_type, self.raw = content_type, raw


def slack_click(world: dict[str, Any]) -> Form:
    payload = {
        "type": "block_actions",
        "team": {"id": SLACK_TEAM},
        "user": {"id": GROUPISH},
        "actions": [{"type": "button", "action_id": "approve", "value": f"approve:{world['pending']}"}],
    }
    return Form("application/x-www-form-urlencoded", urlencode({"payload": json.dumps(payload)}).encode())


def lark_click(world: dict[str, Any]) -> Form:
    doc = lark_support.action({"decision": "approve", "pendingId": world["pending"]}, GROUPISH)
    raw, _ = lark_support.wire(doc, signed=False)
    return Form("application/json", raw)


def dump(h: Harness) -> list[Any]:
    """Every row of every table: a refused request must change none of them."""
    conn = h.rt.stores.sessions.db.connection()  # type: ignore[attr-defined]
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return [(t, conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()) for t in tables]


Body = dict[str, Any] | Callable[[dict[str, Any]], Form] | None
ROUTES: dict[str, tuple[str, str, Body]] = {
    "message_new": ("POST", "/agents/shop/messages", {"message": "hi", "tenant": "acme"}),
    "message_session": ("POST", "/agents/shop/messages", {"message": "hi", "sessionId": "{session}"}),
    "resolve": ("POST", "/pending-approvals/{pending}/resolve", {"decision": "approve"}),
    "deny": ("POST", "/pending-approvals/{pending}/resolve", {"decision": "deny"}),
    "answer": ("POST", "/pending-questions/{pending}/answer", {"answer": "yes"}),
    "list_acme": ("GET", "/pending-approvals?tenant=acme", None),
    "turn": ("GET", "/turns/{turn}", None),
    "events": ("GET", "/turns/{turn}/events", None),
    "cancel": ("POST", "/turns/{turn}/cancel", None),
    "session": ("GET", "/sessions/{session}?tenant=acme", None),
    "session_own": ("GET", "/sessions/{session}", None),  # no tenant named: the caller's own
    "health": ("GET", "/health", None),
    "openapi": ("GET", "/openapi.json", None),
    "slack": ("POST", "/integrations/slack/interactions", slack_click),
    "lark": ("POST", "/integrations/lark/interactions", lark_click),
    "magic": ("GET", "/magic/{token}", None),
}
#                 none operator tenant_a tenant_b approver magic_other
EXPECTED = {
    "message_new": (401, 202, 202, 403, 202, 401),
    # tenant_a may not supersede an approvers-only wait; session ids are scoped by tenant, so tenant_b's
    # message with acme's sessionId starts tenant_b's own session of that id (nothing of acme's leaks)
    "message_session": (401, 202, 403, 202, 202, 401),
    "resolve": (401, 403, 403, 404, 202, 401),  # the operator is no approver of a rule that names them
    "deny": (401, 403, 403, 404, 200, 401),
    "answer": (401, 400, 400, 404, 400, 401),  # an approval's pendingId: 400 names the right route
    "list_acme": (401, 200, 200, 403, 200, 401),
    "turn": (401, 200, 200, 404, 200, 401),
    "events": (401, 200, 200, 404, 200, 401),
    "cancel": (401, 200, 403, 404, 200, 401),
    "session": (401, 200, 200, 403, 200, 401),  # naming a tenant outside the caller's scope: 403
    "session_own": (401, 404, 200, 404, 200, 401),  # the operator's own is the default tenant's
    "health": (200, 200, 200, 200, 200, 200),
    "openapi": (401, 200, 200, 200, 200, 401),
}
LIKE = {
    "jwt_a": "tenant_a",
    "jwt_b": "tenant_b",
    "jwt_approver": "approver",
    "jwt_lists": "approver",
    "jwt_group_sub": "tenant_a",  # jwt:<iss>/group:refund-managers is no group
}
REFUSED_TOKENS = ("jwt_no_tenant", "jwt_other_claim", "jwt_no_scope")  # 403 on every authenticated route
OWN_ROUTE = {"slack": "slack", "lark": "lark"}
"""A signed Slack or Lark request is a credential on its own route only (401 elsewhere)."""
NAMED_LIKE_THE_GROUP = {"slack": 200, "lark": 200, "magic": 403}
"""On its own route, a decider named ``group:refund-managers`` is not the group: Slack and Lark answer
their clicker privately (200, nothing decided), the magic-link page refuses (403)."""


def expected(route: str, caller: str) -> int:
    if route in ("slack", "lark"):
        return NAMED_LIKE_THE_GROUP[route] if OWN_ROUTE.get(caller) == route else 401
    if route == "magic":  # the token is the credential, whoever sends it
        return NAMED_LIKE_THE_GROUP["magic"]
    if route == "health":
        return 200
    if caller in REFUSED_TOKENS:
        return 403
    if caller in OWN_ROUTE:
        return 401
    base = ["none", *BASIC, "magic_other"]
    return EXPECTED[route][base.index(LIKE.get(caller, caller))]


CASES = [(route, caller) for route in ROUTES for caller in CALLERS]


@pytest.mark.parametrize(("route", "caller"), CASES, ids=[f"{r}-{c}" for r, c in CASES])
def test_the_authorization_matrix(world: dict[str, Any], route: str, caller: str) -> None:
    method, path, spec = ROUTES[route]
    path = path.format(**world)
    body: dict[str, Any] | Form | None = None
    if callable(spec):
        body = spec(world)
    elif spec is not None:
        body = {k: (v.format(**world) if isinstance(v, str) else v) for k, v in spec.items()}
    before = dump(world["h"])

    status, reply = request(method, path, body, caller)

    assert status == expected(route, caller), reply
    if status >= 400 and "html" not in reply:  # the magic-link pages answer in HTML
        assert set(reply) >= {"error", "message"}
    if status >= 400 or route in NAMED_LIKE_THE_GROUP:
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
    assert ids("jwt_a") == ids("jwt_lists") == [world["pending"]]
    assert ids("tenant_b") == ids("jwt_b") == []
    assert ids("operator") == []  # the operator names a tenant; without one, the default tenant


def test_a_scoped_caller_who_names_no_tenant_gets_theirs(world: dict[str, Any]) -> None:
    for caller in ("tenant_b", "jwt_b"):
        status, body = request("POST", "/agents/shop/messages", {"message": "small refund"}, caller)
        assert status == 202, body
        assert world["h"].engine.turn(body["turnId"]).tenant == "globex"


def test_an_edit_cannot_move_a_call_past_its_approvers(world: dict[str, Any]) -> None:
    h = world["h"]
    status, small = request("POST", "/agents/shop/messages", {"message": "small refund"}, "tenant_a")
    assert status == 202 and small["pendingItems"][0]["args"] == {"amount": 10}
    pending = small["pendingItems"][0]["pendingId"]
    before = dump(h)
    edit = {"decision": "approve", "editedArgs": {"amount": 9000}}

    for caller in ("tenant_a", "jwt_a", "jwt_group_sub"):
        status, reply = request("POST", f"/pending-approvals/{pending}/resolve", edit, caller)
        assert status == 403 and reply["error"] == "forbidden", reply
    assert dump(h) == before and world["calls"].count("refund") == 0
    status, reply = request("POST", f"/pending-approvals/{pending}/resolve", edit, "jwt_approver")
    assert status == 202, reply
    assert world["calls"].log == [("refund", {"amount": 9000})]


def test_the_approver_token_decides_and_the_turn_finishes(world: dict[str, Any]) -> None:
    status, reply = request(
        "POST", f"/pending-approvals/{world['pending']}/resolve", {"decision": "approve"}, "jwt_lists"
    )
    assert status == 202, reply
    assert world["calls"].count("refund") == 1
    history = world["h"].rt.stores.sessions.load(session_key("acme", world["session"]))
    assert isinstance(history[-1], Message) and history[-1].text == "done"
    [decided] = [e for e in world["h"].engine.audit(world["turn"]) if e["type"] == "decided"]
    assert (decided["decidedBy"], decided["channel"]) == (f"jwt:{ISSUER}/l-sub", "api")


def test_refused_tokens_say_why(world: dict[str, Any]) -> None:
    reasons = {
        "jwt_no_tenant": "no custom:tenant claim",
        "jwt_other_claim": "no custom:tenant claim",  # `tenant` is not the claim this deployment reads
        "jwt_no_scope": f"lacks the scope(s) {SCOPE}",
    }
    for caller, reason in reasons.items():
        status, reply = request("GET", f"/turns/{world['turn']}", None, caller)
        assert (status, reply["error"]) == (403, "forbidden") and reason in reply["message"], reply


def test_a_user_named_like_the_operator_is_a_configuration_error(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "LOOPENGINE_USERS", json.dumps([*USERS, {"user": "admin", "password": "x", "tenants": ["acme"]}])
    )
    before = dump(world["h"])
    status, reply = request(
        "POST", f"/pending-approvals/{world['pending']}/resolve", {"decision": "deny"}, "approver"
    )
    assert status == 500 and reply["error"] != "internal" and "operator" in reply["message"]
    assert dump(world["h"]) == before
