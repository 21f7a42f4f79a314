"""Every decider a verified, source-qualified identity: one ``decidedBy`` format, whatever the channel.

The same agent parks small refunds (no approvers) in the default tenant; each is decided through
another source (HTTP Basic, the operator, a JWT with and without a mapping to users, a magic link,
a Slack button, a Lark button, ``loopengine chat``'s declared label), and the audit trail says who
in one format: the principal's typed id, built from the source's kind and the value as text, with
the channel the server derived from the route. Then the JWT claim shapes one by one: the tenant
claim (missing, a default tenant, Cognito's ``custom:tenant``, list and string forms, invalid
tenants), scopes, groups, issuers and the identity mapping.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from loopengine.channels.lark import routes as lark_route
from loopengine.channels.magic import token as magic
from loopengine.channels.slack import routes as slack_route
from loopengine.channels.slack.blocks import who_text
from loopengine.channels.slack.interact import sign_slack
from loopengine.domain.decisions import DecidedBy, decision_from_dict
from loopengine.domain.principals import OPERATOR, Principal, typed
from loopengine.http import api, auth, root
from loopengine.local.dev import LocalContext, to_event
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests import lark_support
from tests.handler_support import lambda_context
from tests.harness import Build, Calls, Harness, agent

USERS = [{"user": "alice", "password": "a-pw", "tenants": [""]}]
ISSUER = "https://issuer.example/pool/"
SLACK_SECRET, SLACK_TEAM = "sources-slack-signing-secret", "T0SOURCES"
MAGIC_SECRET = "sources-magic-link-secret"
TYPED = re.compile(r"(user|jwt|email|slack|lark):.+")
AMOUNT = {"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}


@pytest.fixture
def h(install_harness: Build, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    for name, value in {
        "LOOPENGINE_USERS": json.dumps(USERS),
        "LOOPENGINE_JWT_DEFAULT_TENANT": "-",
        slack_route.SECRET_ENV: SLACK_SECRET,
        slack_route.TEAM_ENV: SLACK_TEAM,
        lark_route.APP_ID_ENV: lark_support.APP_ID,
        lark_route.TOKEN_ENV: lark_support.TOKEN,
        lark_route.ENCRYPT_KEY_ENV: lark_support.KEY,
        magic.SECRET_ENV: MAGIC_SECRET,
    }.items():
        monkeypatch.setenv(name, value)
    calls = Calls()
    model = ScriptedModel(
        lambda r: say("done") if r.messages[-1].tool_results else call(use("refund", {"amount": 10}))
    )
    yield install_harness(
        agent("shop", [calls.tool("refund", schema=AMOUNT)], {"default_decision": "ask"}), model=model
    )


def send(event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    result = api.handler(event, lambda_context(LocalContext()))
    text = result["body"] or "{}"
    return int(result["statusCode"]), json.loads(text) if text.startswith("{") else {"html": text}


def api_event(
    method: str, path: str, body: Any = None, basic: str | None = None, **headers: str
) -> dict[str, Any]:
    sent = {"content-type": "application/json", **headers}
    if basic is not None:
        sent["authorization"] = "Basic " + base64.b64encode(basic.encode()).decode()
    return to_event(method, path, sent, b"" if body is None else json.dumps(body).encode(), "127.0.0.1")


def as_jwt(event: dict[str, Any], claims: dict[str, Any], scopes: Any = None) -> dict[str, Any]:
    event["requestContext"]["authorizer"] = {"jwt": {"claims": claims, "scopes": scopes}}
    return event


def pause(h: Harness) -> tuple[str, str]:
    out = h.engine.send_message("shop", "small refund")
    return out.turn_id, out.pending[0].pending_id


def resolve(pending: str, **kw: Any) -> dict[str, Any]:
    return api_event("POST", f"/pending-approvals/{pending}/resolve", {"decision": "approve"}, **kw)


def decided(h: Harness, turn_id: str) -> dict[str, Any]:
    [event] = [e for e in h.engine.audit(turn_id) if e["type"] == "decided"]
    return event


# -- one format across channels --------------------------------------------------------------------


def by_basic(h: Harness, pending: str) -> int:
    return send(resolve(pending, basic="alice:a-pw"))[0]


def by_operator(h: Harness, pending: str) -> int:
    return send(resolve(pending, basic="admin:secret"))[0]


def by_live_chat(h: Harness, pending: str) -> int:
    return send(resolve(pending, basic="alice:a-pw", **{"x-loopengine-channel": "live"}))[0]


def by_jwt(h: Harness, pending: str) -> int:
    return send(as_jwt(resolve(pending), {"iss": ISSUER, "sub": "carol"}))[0]


def by_mapped_jwt(h: Harness, pending: str) -> int:
    claims = {"iss": ISSUER, "sub": "c-123", "email": "carol@example.com"}
    return send(as_jwt(resolve(pending), claims))[0]


def by_magic_link(h: Harness, pending: str) -> int:
    token = magic.issue_token(MAGIC_SECRET, pending, "dana@example.com", h.clock.now() + 600)
    form = urlencode({"decision": "approve"}).encode()
    headers = {"content-type": "application/x-www-form-urlencoded"}
    return send(to_event("POST", f"/magic/{token}", headers, form, "127.0.0.1"))[0]


def by_slack(h: Harness, pending: str) -> int:
    payload = {
        "type": "block_actions",
        "team": {"id": SLACK_TEAM},
        "user": {"id": "U0ERIN"},
        "actions": [{"type": "button", "action_id": "approve", "value": f"approve:{pending}"}],
    }
    raw = urlencode({"payload": json.dumps(payload)}).encode()
    now = str(int(h.clock.now()))
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": now,
        "x-slack-signature": sign_slack(SLACK_SECRET, raw, now),
    }
    return send(to_event("POST", "/integrations/slack/interactions", headers, raw, "127.0.0.1"))[0]


def by_lark(h: Harness, pending: str) -> int:
    doc = lark_support.action({"decision": "approve", "pendingId": pending}, "ou_frank")
    return send(lark_support.lark_event(doc, root.engine().now()))[0]


CHANNELS = [
    (by_basic, "user:alice", "api", None),
    (by_operator, "user:admin", "api", None),
    (by_live_chat, "user:alice", "api", "live"),
    (by_jwt, f"jwt:{ISSUER.rstrip('/')}/carol", "api", None),
    (by_mapped_jwt, "user:carol@example.com", "api", None),
    (by_magic_link, "email:dana@example.com", "magic-link", None),
    (by_slack, "slack:U0ERIN", "slack", None),
    (by_lark, "lark:ou_frank", "lark", None),
]


def test_decided_by_has_one_format_across_channels(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    for decide, identity, channel, declared in CHANNELS:
        turn_id, pending = pause(h)
        if decide is by_mapped_jwt:
            monkeypatch.setenv("LOOPENGINE_JWT_IDENTITY", "user:email")  # the operator's opt-in mapping
        status = decide(h, pending)
        monkeypatch.delenv("LOOPENGINE_JWT_IDENTITY", raising=False)
        assert status in (200, 202), (decide.__name__, status)
        event = decided(h, turn_id)
        got = (event["decidedBy"], event["channel"], event.get("declaredChannel"))
        assert got == (identity, channel, declared), decide.__name__
        assert TYPED.fullmatch(event["decidedBy"])
        cp = h.rt.stores.checkpoints.find_by_pending(pending)
        assert cp is not None
        [record] = [d for d in cp.decisions if d.pending_id == pending]
        assert (record.decided_by, record.channel) == (identity, channel)  # the log says the same
        assert h.engine.item(pending).fate.decision == record
        seen.append(event["decidedBy"])
    assert len(seen) == len(CHANNELS)


def test_the_channel_is_the_servers_and_a_declared_label_is_only_recorded(h: Harness) -> None:
    turn_id, pending = pause(h)
    status, reply = send(resolve(pending, basic="alice:a-pw", **{"x-loopengine-channel": "slack"}))
    assert (status, reply["error"]) == (400, "invalid_input")  # no caller may claim another channel
    assert h.engine.outcome(turn_id).pending
    assert auth.route_channel("/inbox") == auth.route_channel("/inbox/pnd_1/resolve") == "inbox"
    assert auth.route_channel("/pending-approvals/pnd_1/resolve") == auth.route_channel("/inboxes") == "api"
    assert DecidedBy("user:a", "api").fields() == {"decidedBy": "user:a", "channel": "api"}
    assert DecidedBy("user:a", "api", "live").fields()["declaredChannel"] == "live"


# -- identities are built, never parsed ------------------------------------------------------------


def test_typed_identities_never_take_their_kind_from_the_value() -> None:
    assert typed("slack", "group:refund-managers") == "slack:group:refund-managers"
    assert typed("email", "user:alice") == "email:user:alice"
    assert typed("slack", "slack:U1") == "slack:slack:U1"  # no second-guessing a prefix either
    slack = Principal(typed("slack", "slack:U1"), "slack", kind="slack")
    assert not slack.may_approve(["slack:U1"]) and slack.may_approve(["slack:slack:U1"])
    for kind, given in [("slack", "group:x"), ("email", "group:x"), ("lark", "user:x"), ("user", "group:x")]:
        who = Principal(given, kind=kind)
        assert who.id == f"{kind}:{given}" and not who.may_approve(["group:x", "user:x"])
    assert Principal("user:alice").id == "user:alice" and Principal("alice").id == "user:alice"
    assert Principal("jwt:https://i/s", kind="jwt").id == "jwt:https://i/s"
    assert Principal("user:s", kind="jwt").id == "user:s"  # the opt-in mapping
    assert Principal("x", kind=OPERATOR).id == "user:x"
    with pytest.raises(ValueError):
        typed("group", "")
    with pytest.raises(ValueError):
        typed("admin", "x")


def test_records_written_before_typed_identities_still_parse_and_show() -> None:
    old = {
        "pendingId": "pnd_1",
        "tool": "t",
        "decision": "approve",
        "at": 1.0,
        "decidedBy": "U123",
        "channel": "slack",
    }
    record = decision_from_dict(old)
    assert (record.decided_by, record.channel) == ("U123", "slack")
    assert record.to_dict() == old
    assert who_text(record.decided_by, record.channel) == "<@U123>" == who_text("slack:U123", "slack")
    assert decision_from_dict({**old, "decidedBy": "alice", "channel": "api"}).decided_by == "alice"


# -- JWT claim shapes --------------------------------------------------------------------------------

APPROVERS = {
    "rules": [{"tool": "refund", "decision": "ask", "approvers": ["group:refund-managers", "user:carol"]}],
    "default_decision": "ask",
}


@pytest.fixture
def acme(install_harness: Build, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Harness, str, str]]:
    """An item in tenant acme that group:refund-managers or user:carol may approve."""
    monkeypatch.setenv("LOOPENGINE_JWT_TENANT_CLAIM", "custom:tenant")
    calls = Calls()
    model = ScriptedModel(
        lambda r: say("done") if r.messages[-1].tool_results else call(use("refund", {"amount": 10}))
    )
    h = install_harness(agent("shop", [calls.tool("refund", schema=AMOUNT)], APPROVERS), model=model)
    out = h.engine.send_message("shop", "refund", tenant="acme")
    yield h, out.turn_id, out.pending[0].pending_id


def jwt_resolve(pending: str, claims: dict[str, Any], scopes: Any = None) -> tuple[int, dict[str, Any]]:
    return send(as_jwt(resolve(pending), {"iss": ISSUER, **claims}, scopes))


MANAGER = {"cognito:groups": "[refund-managers]"}


@pytest.mark.parametrize(
    "tenant",
    ["acme", "[acme globex]", ["acme", "globex"], "acme,globex", "[acme]"],
    ids=["string", "api-gateway-list", "json-list", "commas", "one-in-brackets"],
)
def test_the_tenant_claim_in_every_shape(acme: tuple[Harness, str, str], tenant: Any) -> None:
    _, _, pending = acme
    status, reply = jwt_resolve(pending, {"sub": "m", "custom:tenant": tenant, **MANAGER})
    assert status == 202, reply


@pytest.mark.parametrize("tenant", ["", "[]", "[acme bad/tenant]", ["acme", 7], "acme corp!"])
def test_a_tenant_claim_that_names_no_valid_tenant_is_refused(
    acme: tuple[Harness, str, str], tenant: Any
) -> None:
    h, turn_id, pending = acme
    status, reply = jwt_resolve(pending, {"sub": "m", "custom:tenant": tenant, **MANAGER})
    assert (status, reply["error"]) == (403, "forbidden"), reply
    assert h.engine.outcome(turn_id).pending


def test_without_the_tenant_claim_only_a_named_default_tenant_admits_the_token(
    acme: tuple[Harness, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    h, turn_id, pending = acme
    bare = {"sub": "m", "tenant": "acme", **MANAGER}  # `tenant` is not the claim this deployment reads
    status, reply = jwt_resolve(pending, bare)
    assert status == 403 and "no custom:tenant claim and no default tenant" in reply["message"]
    monkeypatch.setenv("LOOPENGINE_JWT_DEFAULT_TENANT", "-")  # the default tenant "": not acme's item
    assert jwt_resolve(pending, bare)[0] == 404
    monkeypatch.setenv("LOOPENGINE_JWT_DEFAULT_TENANT", "not a tenant!")
    status, reply = jwt_resolve(pending, bare)
    assert status == 500 and "LOOPENGINE_JWT_DEFAULT_TENANT" in reply["message"]
    assert h.engine.outcome(turn_id).pending  # nothing decided so far
    monkeypatch.setenv("LOOPENGINE_JWT_DEFAULT_TENANT", "acme")
    assert jwt_resolve(pending, bare)[0] == 202


@pytest.mark.parametrize(
    "groups,status",
    [
        ("[refund-managers]", 202),
        (["refund-managers"], 202),
        ("refund-managers", 202),
        ("[support refund-managers]", 202),
        ("[support]", 403),
        ("[group:refund-managers]", 403),  # a group *named* group:refund-managers is another group
        (None, 403),
    ],
)
def test_group_claims_in_every_shape(acme: tuple[Harness, str, str], groups: Any, status: int) -> None:
    _, _, pending = acme
    claims = {"sub": "m", "custom:tenant": "acme", "cognito:groups": groups}
    assert jwt_resolve(pending, claims)[0] == status


@pytest.mark.parametrize(
    "claims,scopes,status",
    [
        ({"scope": "openid api/read api/decide"}, None, 202),
        ({"scp": ["api/read", "api/decide"]}, None, 202),
        ({"scp": "api/read api/decide"}, None, 202),
        ({}, ["api/decide", "api/read"], 202),  # the authorizer's scopes
        ({"scope": "api/decide"}, None, 403),
        ({"scope": "api/decide", "scp": ["api/read"]}, None, 202),
        ({}, None, 403),
    ],
)
def test_required_scopes(
    acme: tuple[Harness, str, str],
    monkeypatch: pytest.MonkeyPatch,
    claims: dict[str, Any],
    scopes: Any,
    status: int,
) -> None:
    h, turn_id, pending = acme
    monkeypatch.setenv("LOOPENGINE_JWT_SCOPES", "api/decide, api/read")
    got, reply = jwt_resolve(pending, {"sub": "m", "custom:tenant": "acme", **MANAGER, **claims}, scopes)
    assert got == status, reply
    if status == 403:
        assert "scope" in reply["message"] and h.engine.outcome(turn_id).pending


def test_the_issuer_qualifies_the_subject_unless_the_operator_maps_tokens_to_users(
    acme: tuple[Harness, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    h, turn_id, pending = acme
    carol = {"sub": "carol", "custom:tenant": "acme"}
    assert jwt_resolve(pending, carol)[0] == 403  # jwt:<iss>/carol is not user:carol
    monkeypatch.setenv("LOOPENGINE_JWT_IDENTITY", "user")
    assert jwt_resolve(pending, {**carol, "sub": "group:refund-managers"})[0] == 403  # user:group:…
    assert jwt_resolve(pending, carol)[0] == 202
    event = decided(h, turn_id)
    assert (event["decidedBy"], event["channel"]) == ("user:carol", "api")


@pytest.mark.parametrize(
    "claims,env,status",
    [
        ({"sub": "carol"}, {"LOOPENGINE_JWT_IDENTITY": "user:cognito:username"}, 401),  # the claim is missing
        (
            {"sub": "x", "cognito:username": "carol"},
            {"LOOPENGINE_JWT_IDENTITY": "user:cognito:username"},
            202,
        ),
        ({"sub": "carol"}, {"LOOPENGINE_JWT_IDENTITY": "group"}, 500),
        ({"sub": "carol\u0000"}, {"LOOPENGINE_JWT_IDENTITY": "user"}, 401),
        ({"sub": ""}, {}, 401),
        ({"sub": 42}, {}, 401),
        ({"sub": "x" * 2000}, {}, 401),
        ({"iss": "", "sub": "carol"}, {}, 401),
    ],
)
def test_identity_claims_must_be_there_and_printable(
    acme: tuple[Harness, str, str],
    monkeypatch: pytest.MonkeyPatch,
    claims: dict[str, Any],
    env: dict[str, str],
    status: int,
) -> None:
    h, turn_id, pending = acme
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    got, reply = jwt_resolve(pending, {"custom:tenant": "acme", **claims})
    assert got == status, reply
    if status != 202:
        assert h.engine.outcome(turn_id).pending


def test_a_trailing_slash_on_the_issuer_makes_no_other_identity(acme: tuple[Harness, str, str]) -> None:
    h, turn_id, pending = acme
    assert (
        jwt_resolve(pending, {"iss": "https://a.example/", "sub": "s", "custom:tenant": "acme", **MANAGER})[0]
        == 202
    )
    assert decided(h, turn_id)["decidedBy"] == "jwt:https://a.example/s"


def test_an_empty_authorizer_context_is_no_token(h: Harness) -> None:
    _, pending = pause(h)
    event = resolve(pending)
    event["requestContext"]["authorizer"] = {"jwt": {"claims": {}, "scopes": None}}
    assert send(event)[0] == 401  # no token, no Basic credentials
