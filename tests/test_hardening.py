"""Issue 8 hardening at the handlers: empty webhook secrets, response headers, the Slack workspace
check, and handler logs that never hold a token or a password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest

from loopengine.app.engine import Engine
from loopengine.app.invokers import InlineInvoker, RecordingInvoker
from loopengine.channels.magic.token import issue_token
from loopengine.channels.signing import sign, verify_webhook
from loopengine.channels.slack import routes as slack_handler
from loopengine.channels.slack.interact import parse_interaction, sign_slack
from loopengine.channels.webhook.verify import WebhookReceiver
from loopengine.http import api, root
from loopengine.http.observability import logger as powertools_logger
from tests.handler_support import FakeContext, InstallRoot, lambda_context, load_event, with_auth, with_body
from tests.handler_support import call as http

EVENTS = Path(__file__).resolve().parent.parent / "events"
SLACK_SECRET = "slack-hardening-signing-secret"
MAGIC_SECRET = "handler-hardening-magic-secret"
PASSWORD = "pw-Lambda-7731-never-logged"

# -- webhook signatures with an empty secret ----------------------------------------------------


def test_verify_webhook_refuses_an_empty_secret_even_for_a_matching_signature() -> None:
    # GIVEN a forgery signed with the empty key (what an unset receiver secret would accept)
    body = b'{"event": "approval"}'
    mac = hmac.new(b"", b"1700000000." + body, hashlib.sha256).hexdigest()
    with pytest.raises(ValueError, match="must not be empty"):
        verify_webhook("", body, f"t=1700000000,v1={mac}", now=1_700_000_000)
    with pytest.raises(ValueError, match="must not be empty"):
        verify_webhook("", body, None)  # whatever the request carries


def test_signing_with_an_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        sign("", b"{}", 1_700_000_000)
    assert sign("k", b"{}", 1).startswith("t=1,v1=")


def test_a_receiver_needs_a_secret() -> None:
    with pytest.raises(ValueError, match="non-empty secret"):
        WebhookReceiver("")


# -- headers on every JSON answer ---------------------------------------------------------------


@pytest.fixture
def engine(install_root: InstallRoot) -> Engine:
    return install_root(lambda _engine: RecordingInvoker())


def _raw(event: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = api.handler(event, lambda_context(FakeContext()))
    result["headers"] = {k.lower(): v for k, v in (result.get("headers") or {}).items()}
    return result


@pytest.mark.parametrize(
    "name", sorted(p.stem for p in EVENTS.glob("*.json") if "routeKey" in json.loads(p.read_text()))
)
def test_every_json_answer_is_nosniff_and_no_store(engine: Engine, name: str) -> None:
    for event in (load_event(name), with_auth(load_event(name), None)):
        result = _raw(event)
        headers = result["headers"]
        if headers["content-type"].startswith("application/json"):
            assert headers["x-content-type-options"] == "nosniff", (name, result)
            assert headers["cache-control"] == "no-store", (name, result)
        elif name == "inbox_static":  # the inbox's CSS/JS: never sniffed, kept privately (versioned URLs)
            assert headers["content-type"].startswith("text/css")
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["cache-control"].startswith("private")
        elif name == "chat_static":  # the client module by name: never sniffed, checked again each time
            assert headers["content-type"].startswith("text/javascript")
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["cache-control"] == "no-cache"
        else:  # the magic-link, inbox and chat pages and Swagger UI: HTML, never sniffed or cached either
            assert headers["content-type"].startswith("text/html")
            assert name.startswith(("magic", "get_docs", "inbox", "chat"))
            assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"


def test_errors_and_unknown_routes_carry_the_headers_too(engine: Engine) -> None:
    event = load_event("health")
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/nope"
    for result in (_raw(event), _raw(with_body(load_event("post_message"), "{bad json"))):
        assert result["statusCode"] in (400, 401, 404)
        assert result["headers"]["x-content-type-options"] == "nosniff"
        assert result["headers"]["cache-control"] == "no-store"


# -- Slack: clicks from another workspace -------------------------------------------------------


@pytest.fixture
def slack_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(slack_handler.SECRET_ENV, SLACK_SECRET)
    yield


def slack_click(value: str, team: str | None) -> dict[str, Any]:
    event = load_event("slack_interaction")
    [raw] = parse_qs(event["body"])["payload"]
    payload = json.loads(raw)
    payload["actions"][0]["value"] = value
    payload.pop("response_url")
    if team is None:
        payload.pop("team")
    else:
        payload["team"]["id"] = team
    body = urlencode({"payload": json.dumps(payload)}).encode()
    now = int(root.engine().rt.stores.clock.now())
    event = with_body(event, body.decode())
    event["headers"] = {
        **event["headers"],
        "x-slack-request-timestamp": str(now),
        "x-slack-signature": sign_slack(SLACK_SECRET, body, now),
    }
    return event


def test_the_click_carries_its_workspace() -> None:
    body = urlencode(
        {"payload": json.dumps(json.loads(parse_qs(load_event("slack_interaction")["body"])["payload"][0]))}
    )
    assert parse_interaction(body.encode()).team_id == "T00000000"


@pytest.mark.parametrize("team", ["T0OTHER", None])
def test_a_click_from_another_workspace_is_403_and_decides_nothing(
    engine: Engine, slack_env: None, monkeypatch: pytest.MonkeyPatch, team: str | None
) -> None:
    # GIVEN the deployment accepts clicks from workspace T00000000 (and a second one) only
    monkeypatch.setenv(slack_handler.TEAM_ENV, "T00000000, T0SECOND")
    status, paused = http(api.handler, load_event("post_message"))
    pending = paused["pendingItems"][0]["pendingId"]
    # WHEN a correctly signed click arrives from another workspace (or names none)
    status, body = http(api.handler, slack_click(f"approve:{pending}", team))
    # THEN it is refused and the item is still open
    assert (status, body["error"]) == (403, "forbidden"), body
    cp = engine.rt.stores.checkpoints.find_by_pending(pending)
    assert cp is not None and pending in cp.outstanding and not cp.decisions


def test_a_click_from_the_configured_workspace_decides(
    engine: Engine, slack_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(slack_handler.TEAM_ENV, "T0SECOND,T00000000")
    _, paused = http(api.handler, load_event("post_message"))
    pending = paused["pendingItems"][0]["pendingId"]
    status, body = http(api.handler, slack_click(f"deny:{pending}", "T00000000"))
    assert status == 200 and body["text"].startswith("Denied"), body


def test_without_a_configured_workspace_every_signed_click_is_403(
    engine: Engine, slack_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fail closed: with LOOPENGINE_SLACK_TEAM_ID unset, no workspace may decide
    monkeypatch.delenv(slack_handler.TEAM_ENV, raising=False)
    _, paused = http(api.handler, load_event("post_message"))
    pending = paused["pendingItems"][0]["pendingId"]
    for team in ("T0ANY", "T00000000", None):
        status, body = http(api.handler, slack_click(f"deny:{pending}", team))
        assert (status, body["error"]) == (403, "forbidden"), body
    cp = engine.rt.stores.checkpoints.find_by_pending(pending)
    assert cp is not None and pending in cp.outstanding and not cp.decisions


# -- handler logs hold no token and no password ---------------------------------------------------


def test_the_handler_logs_hold_no_token_and_no_password(
    install_root: InstallRoot, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the api with Basic users and magic links, logging everything it logs at DEBUG
    users = [{"user": "ops", "password": PASSWORD, "tenants": [""]}]
    engine = install_root(
        lambda e: InlineInvoker(e.resume),
        LOOPENGINE_ADMIN_AUTH=f"admin:{PASSWORD}",
        LOOPENGINE_USERS=json.dumps(users),
        LOOPENGINE_MAGIC_LINK_SECRET=MAGIC_SECRET,
    )
    caplog.set_level(logging.DEBUG)
    level = powertools_logger.log_level
    powertools_logger.setLevel("DEBUG")
    try:
        # WHEN Basic-auth requests (good and bad) and a magic-link GET and POST are served
        status, paused = http(api.handler, with_auth(load_event("post_message"), "ops", PASSWORD))
        assert status == 202, paused
        assert http(api.handler, with_auth(load_event("list_pending"), "ops", "wrong-" + PASSWORD))[0] == 401
        pending = paused["pendingItems"][0]["pendingId"]
        token = issue_token(MAGIC_SECRET, pending, "reviewer@example.com", engine.rt.stores.clock.now() + 600)
        get = load_event("magic_get")
        post = load_event("magic_post")
        for event in (get, post):
            placeholder = event["pathParameters"]["token"]
            text = json.dumps(event).replace(placeholder, token)
            assert http(api.handler, json.loads(text))[0] == 200
        assert engine.turn(paused["turnId"]).stop_reason is not None or engine.outcome(paused["turnId"])
    finally:
        powertools_logger.setLevel(level)
    # THEN the logs (records with their fields, and the process output) hold none of them
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    out, err = capfd.readouterr()
    assert logged or out or err, "nothing was logged: the check would prove nothing"
    creds = base64.b64encode(f"ops:{PASSWORD}".encode()).decode()
    for text in (logged, out, err):
        for secret in (PASSWORD, token, token.split(".")[-1], creds, MAGIC_SECRET):
            assert secret not in text
