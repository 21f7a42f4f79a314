"""Slack interactivity: signature verification, the click payload, and the route through the api handler.

Handler tests start from events/slack_interaction.json, swap its body for a correctly signed one
(the event file's payload with a real ``approve:<pendingId>`` button value) and check what was decided
and stored, and what Slack is told: in the 200's body and, over real HTTP, in the POST to the click's
``response_url``, which points at a local receiver on 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopengine.app.engine import Engine
from loopengine.app.invokers import InlineInvoker, RecordingInvoker
from loopengine.app.request.resolution import Decider
from loopengine.authoring.agent import AgentConfig
from loopengine.channels.base import NOT_AN_APPROVER
from loopengine.channels.slack import routes as slack_handler
from loopengine.channels.slack.interact import (
    SlackAction,
    SlackRejectReason,
    SlackVerificationError,
    approval_blocks,
    button_value,
    parse_interaction,
    sign_slack,
    verify_slack,
)
from loopengine.channels.slack.reply import post_reply
from loopengine.domain.base.errors import DeliveryError, InvalidInput
from loopengine.domain.policy import Expiry
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.http import api, root
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.handler_support import PLACEHOLDER_PENDING, InstallRoot, load_event, with_body
from tests.handler_support import call as http
from tests.harness import Build, Calls, Harness, agent
from tests.slack_support import REPLY_PATH, Posted, ResponseUrls

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # Slack's documentation example shape
T0 = 1_531_420_618
BODY = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&command=%2Fweather&text=94070"
ALICE, BOB = "U0ALICE", "U0BOB"
Reply = tuple[int, dict[str, Any]]


def rejected(
    body: bytes,
    timestamp: str | None,
    signature: str | None,
    *,
    secret: str = SECRET,
    now: float = T0,
) -> SlackRejectReason:
    with pytest.raises(SlackVerificationError) as info:
        verify_slack(secret, body, timestamp, signature, now)
    return info.value.reason


# -- verification -------------------------------------------------------------------------


def test_the_signature_is_slacks_v0_scheme() -> None:
    expected = hmac.new(SECRET.encode(), b"v0:%d:" % T0 + BODY, hashlib.sha256).hexdigest()
    assert sign_slack(SECRET, BODY, T0) == f"v0={expected}"


def test_a_valid_request_passes() -> None:
    sig = sign_slack(SECRET, BODY, T0)
    verify_slack(SECRET, BODY, str(T0), sig, T0)  # raises when it refuses
    verify_slack(SECRET, BODY, str(T0), sig.upper().replace("V0=", "v0="), T0 + 300)
    verify_slack(SECRET, BODY, str(T0), sig, T0 - 300)


def test_a_tampered_body_is_refused() -> None:
    sig = sign_slack(SECRET, BODY, T0)
    assert rejected(BODY + b"&x=1", str(T0), sig) is SlackRejectReason.BAD_SIGNATURE
    assert rejected(BODY.replace(b"94070", b"94071"), str(T0), sig) is SlackRejectReason.BAD_SIGNATURE


def test_a_wrong_secret_is_refused() -> None:
    sig = sign_slack("someone-elses-secret", BODY, T0)
    assert rejected(BODY, str(T0), sig) is SlackRejectReason.BAD_SIGNATURE


def test_a_signature_for_another_timestamp_is_refused() -> None:
    sig = sign_slack(SECRET, BODY, T0 - 1)
    assert rejected(BODY, str(T0), sig) is SlackRejectReason.BAD_SIGNATURE


@pytest.mark.parametrize("offset", [301, -301, 10_000])
def test_a_stale_timestamp_is_refused_either_way(offset: int) -> None:
    sent = T0 - offset  # the request was signed `offset` seconds before (or after) now
    sig = sign_slack(SECRET, BODY, sent)
    assert rejected(BODY, str(sent), sig) is SlackRejectReason.STALE_TIMESTAMP


def test_the_tolerance_can_be_changed() -> None:
    sig = sign_slack(SECRET, BODY, T0)
    verify_slack(SECRET, BODY, str(T0), sig, T0 + 30, tolerance=30)
    with pytest.raises(SlackVerificationError):
        verify_slack(SECRET, BODY, str(T0), sig, T0 + 31, tolerance=30)


@pytest.mark.parametrize(
    "timestamp,signature",
    [(None, "sig"), (str(T0), None), (None, None), ("", "sig"), (str(T0), "")],
)
def test_missing_headers_are_refused(timestamp: str | None, signature: str | None) -> None:
    if signature == "sig":
        signature = sign_slack(SECRET, BODY, T0)
    assert rejected(BODY, timestamp, signature) is SlackRejectReason.MISSING_HEADER


@pytest.mark.parametrize(
    "timestamp,signature",
    [
        ("soon", None),
        ("-5", None),
        ("1531420618.5", None),
        ("\u0661\u0665\u0663", None),  # Arabic-Indic digits are digits to str.isdigit, not to us
        (str(T0), "v1=" + "0" * 64),
        (str(T0), "v0=" + "0" * 63),
        (str(T0), "v0=" + "g" * 64),
        (str(T0), "t=1,v0=" + "0" * 64),
    ],
)
def test_malformed_headers_are_refused(timestamp: str, signature: str | None) -> None:
    signature = signature or sign_slack(SECRET, BODY, T0)
    assert rejected(BODY, timestamp, signature) is SlackRejectReason.MALFORMED_HEADER


def test_an_empty_secret_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="secret"):
        verify_slack("", BODY, str(T0), sign_slack("", BODY, T0), T0)


@settings(max_examples=200, deadline=None)
@given(
    body=st.binary(max_size=2048),
    secret=st.text(min_size=1, max_size=64),
    skew=st.integers(min_value=-300, max_value=300),
    flip=st.integers(min_value=0),
)
def test_property_signed_bodies_pass_and_any_changed_byte_fails(
    body: bytes, secret: str, skew: int, flip: int
) -> None:
    sig = sign_slack(secret, body, T0)
    verify_slack(secret, body, str(T0), sig, T0 + skew)
    changed = bytearray(body + b"!")
    changed[flip % len(changed)] ^= 0x01
    with pytest.raises(SlackVerificationError) as info:
        verify_slack(secret, bytes(changed), str(T0), sig, T0 + skew)
    assert info.value.reason is SlackRejectReason.BAD_SIGNATURE


# -- the click payload ----------------------------------------------------------------------


def form(payload: Any) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return urlencode({"payload": text}).encode()


def click_payload(value: str, user: str = ALICE, **extra: Any) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": user, "username": "alice", "name": "alice", "team_id": "T0"},
        "actions": [{"type": "button", "action_id": "approve", "value": value}],
        **extra,
    }


def test_a_click_is_parsed() -> None:
    url = "https://hooks.slack.com/actions/T0/1/abc"
    action = parse_interaction(form(click_payload("deny:pnd_1", response_url=url)))
    assert action == SlackAction("deny", "pnd_1", ALICE, "alice", url)


def test_the_buttons_we_send_are_the_buttons_we_read() -> None:
    blocks = approval_blocks("pnd_abc", "issue_refund", {"amount": 212.0}, "refunds ask")
    [actions] = [b for b in blocks if b["type"] == "actions"]
    approve, deny = actions["elements"]
    assert (approve["value"], deny["value"]) == ("approve:pnd_abc", "deny:pnd_abc")
    assert approve["action_id"] != deny["action_id"]
    for button, decision in ((approve, "approve"), (deny, "deny")):
        payload = click_payload(button["value"])
        payload["actions"] = [button]
        action = parse_interaction(form(payload))
        assert isinstance(action, SlackAction)
        assert action.decision == decision


def test_the_message_escapes_what_the_model_wrote() -> None:
    blocks = approval_blocks("pnd_1", "send_email", {"body": "<!channel> & <https://x|y>"}, "<@U1> asks")
    text = json.dumps(blocks)
    assert "<!channel>" not in text and "<@U1>" not in text
    assert "&lt;!channel&gt; &amp;" in text


def test_a_huge_argument_list_is_clipped_to_slacks_limit() -> None:
    blocks = approval_blocks("pnd_1", "t", {"x": "y" * 10_000}, "")
    assert all(len(b["text"]["text"]) <= 3000 for b in blocks if b["type"] == "section")


def test_button_values_refuse_bad_ids() -> None:
    with pytest.raises(ValueError):
        button_value("approve", "pnd 1")
    with pytest.raises(ValueError):
        button_value("maybe", "pnd_1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "body,message",
    [
        (b"\xff\xfe", "UTF-8"),
        (b"nothing=here", "payload"),
        (b"payload=1&payload=2", "payload"),
        (form("{not json"), "JSON"),
        (form("[" * 100_000), "JSON"),
        (form([1, 2]), "object"),
        (form({**click_payload("approve:pnd_1"), "type": "view_submission"}), "view_submission"),
        (form({**click_payload("approve:pnd_1"), "user": {"name": "x"}}), "user"),
        (form({**click_payload("approve:pnd_1"), "actions": []}), "actions"),
        (form({**click_payload("approve:pnd_1"), "actions": ["x"]}), "actions"),
        (form(click_payload("pnd_1")), "approve:<pendingId>"),
        (form(click_payload("maybe:pnd_1")), "approve:<pendingId>"),
        (form(click_payload("approve:")), "pendingId"),
        (form(click_payload("approve:pnd_1/../x")), "pendingId"),
        (form({**click_payload("x"), "actions": [{"value": 7}]}), "string"),
    ],
)
def test_malformed_payloads_say_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(InvalidInput, match=r"Slack|button") as info:
        parse_interaction(body)
    assert message in str(info.value)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=512), st.text(max_size=256).map(lambda t: form(t))))
def test_property_anything_malformed_is_invalid_input(body: bytes) -> None:
    # InvalidInput or a click; never another exception (that would be a 500 in the handler)
    with contextlib.suppress(InvalidInput):
        parse_interaction(body)


# -- Slack's response_url, played by a local receiver -----------------------------------------

RESPONSE_URL: str | None = None
"""The response_url clicks carry by default: the receiver's, set for every test below."""


@pytest.fixture(scope="module")
def response_urls() -> Iterator[ResponseUrls]:
    with ResponseUrls() as rx:
        yield rx


@pytest.fixture(autouse=True)
def replies(response_urls: ResponseUrls, monkeypatch: pytest.MonkeyPatch) -> ResponseUrls:
    response_urls.reset()
    monkeypatch.setitem(globals(), "RESPONSE_URL", response_urls.url)
    return response_urls


def logged(caplog: pytest.LogCaptureFixture) -> str:
    """Everything the handlers logged: each record's message and its structured fields."""
    return "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- post_reply: the POST itself ---------------------------------------------------------------


def test_post_reply_posts_the_message_as_json(replies: ResponseUrls) -> None:
    post_reply(replies.url, replaced("Approved by <@U0ALICE>"))
    assert replies.posted == [
        Posted(REPLY_PATH, "application/json; charset=utf-8", replaced("Approved by <@U0ALICE>"))
    ]


def test_post_reply_posts_to_https_through_a_transport() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="ok")

    url = "https://hooks.slack.com/actions/T0/1/abc"
    post_reply(url, {"text": "é"}, transport=httpx.MockTransport(answer))
    [request] = seen
    assert (request.method, str(request.url)) == ("POST", url)
    assert json.loads(request.content) == {"text": "é"}


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.slack.com/actions/T0/1/abc",  # http only to a loopback host
        "http://10.0.0.1/actions/x",
        "ftp://127.0.0.1/x",
        "file:///etc/passwd",
        "/actions/T0/1/abc",
        "https://user:pw@hooks.slack.com/actions/x",
        "https://hooks.slack.com:99999/x",
        "",
    ],
)
def test_post_reply_refuses_urls_that_are_not_https_without_sending(url: str) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"nothing may be sent to {url!r}")

    with pytest.raises(DeliveryError, match="response_url") as info:
        post_reply(url, {"text": "x"}, transport=httpx.MockTransport(answer))
    assert "/actions" not in str(info.value) and "pw" not in str(info.value)


@pytest.mark.parametrize(
    "outcome,message",
    [
        (httpx.Response(404, text="expired_url"), "answered 404 Not Found (expired_url)"),
        (httpx.Response(302, headers={"Location": "https://evil.example/"}), "answered 302 Found"),
        (httpx.Response(500, text=f"oops at {REPLY_PATH}"), "answered 500"),
        (httpx.ReadTimeout("read timed out"), "timed out after 3 s (ReadTimeout)"),
        (httpx.ConnectError(f"cannot reach https://hooks.slack.com{REPLY_PATH}"), "failed: ConnectError"),
    ],
)
def test_post_reply_failures_are_delivery_errors_naming_only_the_host(
    outcome: httpx.Response | Exception, message: str
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    url = f"https://hooks.slack.com{REPLY_PATH}"
    with pytest.raises(DeliveryError) as info:
        post_reply(url, {"text": "x"}, transport=httpx.MockTransport(answer))
    text = str(info.value)
    assert text.startswith("Slack response_url https://hooks.slack.com ") and message in text, text
    assert "s3cr3t" not in text and info.value.__cause__ is None


def test_post_reply_over_real_http_failures() -> None:
    with pytest.raises(DeliveryError, match="ConnectError") as info:
        post_reply(f"http://127.0.0.1:{closed_port()}{REPLY_PATH}", {"text": "x"})
    assert "s3cr3t" not in str(info.value)
    with pytest.raises(DeliveryError, match="JSON"):
        post_reply("https://hooks.slack.com/x", {"text": float("nan")})


# -- the route: customer-service through the api handler ------------------------------------


TEAM = "T00000000"
"""The workspace of events/slack_interaction.json, the one the route is configured for below."""


@pytest.fixture(autouse=True)
def fresh_secret(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(slack_handler.SECRET_ENV, SECRET)
    monkeypatch.setenv(slack_handler.TEAM_ENV, TEAM)
    yield


@pytest.fixture
def engine(install_root: InstallRoot) -> Engine:
    return install_root(lambda _engine: RecordingInvoker())


def slack_event(
    value: str,
    user: str = ALICE,
    *,
    secret: str = SECRET,
    skew: float = 0,
    b64: bool = False,
    body: bytes | None = None,
    response_url: str | None = "",
) -> dict[str, Any]:
    """events/slack_interaction.json with the button value ``value``, signed now with ``secret``.

    ``response_url`` defaults to the local receiver's; ``None`` leaves it out of the payload.
    """
    event = load_event("slack_interaction")
    if body is None:
        # The event file's body is Slack's form post; keep its payload, change who and what.
        [raw] = parse_qs(event["body"])["payload"]
        payload = json.loads(raw)
        assert payload["type"] == "block_actions"
        payload["user"]["id"] = user
        payload["actions"][0]["value"] = value
        payload.pop("response_url")
        if response_url is not None:
            payload["response_url"] = response_url or RESPONSE_URL
        body = urlencode({"payload": json.dumps(payload)}).encode()
    now = int(root.engine().rt.stores.clock.now() + skew)
    event = with_body(event, base64.b64encode(body).decode() if b64 else body.decode())
    event["isBase64Encoded"] = b64
    event["headers"] = {
        **event["headers"],
        "content-length": str(len(body)),
        "x-slack-request-timestamp": str(now),
        "x-slack-signature": sign_slack(secret, body, now),
    }
    return event


def click(value: str, user: str = ALICE, **kw: Any) -> Reply:
    return http(api.handler, slack_event(value, user, **kw))


def pause_refund() -> dict[str, Any]:
    status, body = http(api.handler, load_event("post_message"))
    assert status == 202 and body["pendingItems"][0]["tool"] == "issue_refund", body
    return body


def decided(engine: Engine, turn_id: str) -> list[dict[str, Any]]:
    return [e for e in engine.rt.stores.turns.events(turn_id) if e["type"] == "decided"]


def replaced(text: str) -> dict[str, Any]:
    return {"replace_original": True, "text": text}


def test_approve_resolves_and_the_turn_resumes(engine: Engine) -> None:
    # GIVEN a turn parked on the refund
    paused = pause_refund()
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    # WHEN Alice clicks Approve in Slack
    status, body = click(f"approve:{pending}")
    # THEN Slack is told who approved at once, and the resume was handed on: the worker runs it
    assert (status, body) == (200, replaced(f"Approved by <@{ALICE}>"))
    assert isinstance(engine.rt.invoker, RecordingInvoker) and engine.rt.invoker.invoked == [turn_id]
    assert not [c for c in engine.rt.stores.turns.calls(turn_id).values() if c.tool == "issue_refund"]
    engine.resume(engine.rt.invoker.invoked.pop())
    calls = engine.rt.stores.turns.calls(turn_id).values()
    assert [c.tool for c in calls if c.tool == "issue_refund" and c.outcome == "ok"] == ["issue_refund"]
    # AND the decision records the Slack user and channel, in the audit and the checkpoint
    [event] = decided(engine, turn_id)
    assert (event["decidedBy"], event["channel"], event["decision"]) == (f"slack:{ALICE}", "slack", "approve")
    cp = engine.rt.stores.checkpoints.find_by_pending(pending)
    assert cp is not None
    [record] = [d for d in cp.decisions if d.pending_id == pending]
    assert (record.decided_by, record.channel) == (f"slack:{ALICE}", "slack")
    # AND the resume continued the turn (it chained to the refund email)
    assert engine.outcome(turn_id).pending[0].tool == "send_email"


def test_approve_with_an_inline_resume_runs_the_turn_on(engine: Engine) -> None:
    invoker = InlineInvoker(engine.resume)
    engine.rt.invoker = invoker
    paused = pause_refund()
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    assert click(f"approve:{pending}") == (200, replaced(f"Approved by <@{ALICE}>"))
    email = engine.outcome(turn_id).pending
    assert engine.turn(turn_id).status is TurnStatus.PAUSED and email[0].tool == "send_email"
    assert click(f"approve:{email[0].pending_id}", BOB) == (200, replaced(f"Approved by <@{BOB}>"))
    finished = engine.turn(turn_id)
    assert finished.status is TurnStatus.FINISHED and finished.stop_reason is StopReason.END_TURN


def test_deny_finishes_the_turn_denied(engine: Engine) -> None:
    paused = pause_refund()
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    assert click(f"deny:{pending}", BOB) == (200, replaced(f"Denied by <@{BOB}>"))
    turn = engine.turn(turn_id)
    assert turn.status is TurnStatus.FINISHED and turn.stop_reason is StopReason.DENIED
    [event] = decided(engine, turn_id)
    assert (event["decidedBy"], event["channel"], event["decision"]) == (f"slack:{BOB}", "slack", "deny")
    assert not [c for c in engine.rt.stores.turns.calls(turn_id).values() if c.tool == "issue_refund"]


def test_a_late_click_is_already_resolved(engine: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    assert click(f"approve:{pending}")[0] == 200
    # a second click, either button, by anyone: nothing runs twice
    # the reply says what became of the item and who decided it (one item_fate for every channel)
    late = replaced(f"Already resolved: approved by <@{ALICE}>")
    assert click(f"approve:{pending}", BOB) == (200, late)
    assert click(f"deny:{pending}", BOB) == (200, late)
    assert len(decided(engine, paused["turnId"])) == 1
    # an id nobody ever handed out
    assert click("approve:pnd_unknown") == (200, replaced("Already resolved"))


def test_a_click_after_a_supersede_says_so(engine: Engine) -> None:
    # GIVEN a parked turn, and the user moves on with a new message on the same session
    paused = pause_refund()
    body = {"message": "Order A-1002: where is it?", "sessionId": paused["sessionId"]}
    status, reply = http(api.handler, with_body(load_event("post_message"), body))
    assert status == 200 and reply["turnId"] != paused["turnId"]
    # WHEN someone clicks the old message's button
    status, answer = click(f"approve:{paused['pendingItems'][0]['pendingId']}")
    # THEN Slack shows why, and nothing was decided or run
    assert (status, answer) == (200, replaced("Superseded: the user moved on with a new message"))
    assert decided(engine, paused["turnId"]) == []
    assert engine.turn(paused["turnId"]).stop_reason is StopReason.SUPERSEDED


def test_a_bad_signature_is_401_and_decides_nothing(engine: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    for event in (
        slack_event(f"approve:{pending}", secret="not-the-secret"),
        slack_event(f"approve:{pending}", skew=-330),  # past the 5-minute window, with a margin
        slack_event(f"approve:{pending}", skew=330),
    ):
        status, body = http(api.handler, event)
        assert status == 401 and body["error"] == "unauthorized", body
    tampered = slack_event(f"deny:{pending}")
    tampered["body"] = tampered["body"].replace("deny%3A", "approve%3A")
    assert http(api.handler, tampered)[0] == 401
    headless = slack_event(f"approve:{pending}")
    del headless["headers"]["x-slack-signature"]
    assert http(api.handler, headless)[0] == 401
    assert decided(engine, paused["turnId"]) == []
    assert engine.turn(paused["turnId"]).status is TurnStatus.PAUSED


def test_the_unedited_sample_event_is_refused(engine: Engine) -> None:
    # its timestamp is long past and its signature is all zeros
    status, body = http(api.handler, load_event("slack_interaction"))
    assert status == 401 and body["error"] == "unauthorized"


def test_no_secret_configured_is_503_and_nothing_is_decided(
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    monkeypatch.delenv(slack_handler.SECRET_ENV)
    status, body = click(f"approve:{pending}")
    assert (status, body) == (503, {"error": "not_configured", "message": "Slack is not configured"})
    assert decided(engine, paused["turnId"]) == []
    assert SECRET not in capsys.readouterr().out and SECRET not in logged(caplog)


def test_a_rotated_secret_applies_without_a_restart(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    # the secret is read per request through loopengine.http.secrets (in AWS: Secrets Manager, cached),
    # so a rotation needs no redeploy (issue 8); the old secret stops working
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    assert click("approve:pnd_unknown")[0] == 200
    monkeypatch.setenv(slack_handler.SECRET_ENV, "rotated-secret")
    assert click(f"deny:{pending}", secret=SECRET)[0] == 401
    assert click(f"deny:{pending}", secret="rotated-secret")[0] == 200


def test_the_secret_is_never_logged(
    engine: Engine, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    click(f"approve:{pending}", secret="wrong")
    click(f"approve:{pending}")
    captured = capsys.readouterr()
    assert SECRET not in captured.out and SECRET not in captured.err
    assert "refused a Slack request" in logged(caplog)  # the log is seen, and the secret is not in it
    assert SECRET not in logged(caplog)


def test_a_base64_encoded_body_is_verified_on_its_bytes(engine: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    assert click(f"approve:{pending}", b64=True) == (200, replaced(f"Approved by <@{ALICE}>"))
    [event] = decided(engine, paused["turnId"])
    assert event["channel"] == "slack"


def test_broken_base64_is_400(engine: Engine) -> None:
    event = slack_event("approve:pnd_1", b64=True)
    event["body"] = "***not base64***"
    status, body = http(api.handler, event)
    assert status == 400 and "Traceback" not in body["message"]


@pytest.mark.parametrize(
    "body",
    [
        b"payload=%7Bnot+json",
        form({"type": "view_submission"}),
        form(click_payload("pnd_0000")),
        b"no-payload-here",
    ],
)
def test_a_signed_but_malformed_payload_is_400_json(engine: Engine, body: bytes) -> None:
    status, reply = http(api.handler, slack_event("", body=body))
    assert status == 400 and reply["error"] == "invalid_input", reply
    assert "Traceback" not in reply["message"]


def test_an_oversized_body_is_413(engine: Engine) -> None:
    status, body = http(api.handler, slack_event("", body=b"payload=" + b"x" * 300_000))
    assert status == 413 and body["error"] == "too_large"


def test_the_route_needs_no_basic_credentials(engine: Engine) -> None:
    paused = pause_refund()
    event = slack_event(f"approve:{paused['pendingItems'][0]['pendingId']}")
    assert "authorization" not in event["headers"]
    assert http(api.handler, event)[0] == 200


def test_the_sample_event_is_a_click_on_the_button_we_send() -> None:
    event = load_event("slack_interaction")
    assert event["headers"]["content-length"] == str(len(event["body"].encode()))
    [raw] = parse_qs(event["body"])["payload"]
    [clicked] = json.loads(raw)["actions"]
    blocks = approval_blocks(PLACEHOLDER_PENDING, "issue_refund", {}, "")
    [buttons] = [b for b in blocks if b["type"] == "actions"]
    sent = buttons["elements"][0]
    assert (clicked["action_id"], clicked["value"]) == (sent["action_id"], sent["value"])
    assert clicked["value"] == f"approve:{PLACEHOLDER_PENDING}"
    assert clicked["block_id"] == buttons["block_id"]
    action = parse_interaction(event["body"].encode())
    assert isinstance(action, SlackAction)
    assert (action.decision, action.pending_id) == ("approve", PLACEHOLDER_PENDING)
    assert action.user_id == "U00000000"
    assert action.response_url is not None and action.response_url.startswith("https://hooks.slack.com/")


# -- the route: the reply goes to response_url ---------------------------------------------------


def test_the_decision_is_posted_to_the_response_url(engine: Engine, replies: ResponseUrls) -> None:
    # GIVEN a parked refund, and Slack's response_url for the click (a local receiver)
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    # WHEN Alice approves
    status, body = click(f"approve:{pending}")
    # THEN the message is replaced through response_url, with the same reply the 200 carries
    assert (status, body) == (200, replaced(f"Approved by <@{ALICE}>"))
    assert replies.posted == [Posted(REPLY_PATH, "application/json; charset=utf-8", body)]
    # AND a late click replaces it again with what happened, once per click
    late = replaced(f"Already resolved: approved by <@{ALICE}>")
    assert click(f"deny:{pending}", BOB) == (200, late)
    assert [p.message for p in replies.posted] == [body, late]


def test_without_a_response_url_nothing_is_posted(engine: Engine, replies: ResponseUrls) -> None:
    paused = pause_refund()
    event = slack_event(f"approve:{paused['pendingItems'][0]['pendingId']}", response_url=None)
    assert http(api.handler, event) == (200, replaced(f"Approved by <@{ALICE}>"))
    assert replies.posted == []
    assert len(decided(engine, paused["turnId"])) == 1


@pytest.mark.parametrize("failure", ["404 expired_url", "500", "timeout", "refused", "not https"])
def test_a_failing_response_url_still_answers_200_and_the_decision_stands(
    engine: Engine,
    replies: ResponseUrls,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failure: str,
) -> None:
    paused = pause_refund()
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    url = replies.url
    if failure == "404 expired_url":
        replies.status, replies.answer = 404, b"expired_url"
    elif failure == "500":
        replies.status, replies.answer = 500, b"internal error"
    elif failure == "timeout":
        monkeypatch.setattr(slack_handler, "REPLY_TIMEOUT", 0.2)
        replies.delay = 1.0
    elif failure == "refused":
        url = f"http://127.0.0.1:{closed_port()}{REPLY_PATH}"
    else:
        url = f"http://hooks.slack.com{REPLY_PATH}"  # refused before anything is sent
    # WHEN the click's response_url cannot be reached or refuses the reply
    status, body = click(f"approve:{pending}", response_url=url)
    # THEN Slack still gets its 200 with the reply, and the approval was decided and handed on
    assert (status, body) == (200, replaced(f"Approved by <@{ALICE}>"))
    [event] = decided(engine, turn_id)
    assert (event["decidedBy"], event["channel"], event["decision"]) == (f"slack:{ALICE}", "slack", "approve")
    assert isinstance(engine.rt.invoker, RecordingInvoker) and engine.rt.invoker.invoked == [turn_id]
    # AND where the receiver was reached, it was sent the reply
    reached = failure not in ("refused", "not https")
    assert [p.message for p in replies.posted] == ([body] if reached else [])
    # AND the failure is logged without the response_url's credential
    [warning] = [r for r in caplog.records if r.getMessage() == "could not update the Slack message"]
    assert warning.__dict__["error"].startswith("Slack response_url ")
    assert "s3cr3tT0k3n" not in logged(caplog)
    # AND the item stays decided: a second click is a late click
    replies.reset()
    assert click(f"approve:{pending}", BOB) == (200, replaced(f"Already resolved: approved by <@{ALICE}>"))


# -- the route: approvers, questions, cancel and expiry (harness agent) ---------------------


@pytest.fixture
def build(install_harness: Build) -> Build:
    return install_harness


def park(h: Harness) -> tuple[str, str]:
    out = h.engine.send_message("waiter", "please")
    assert out.status is TurnStatus.PAUSED
    return out.turn_id, out.pending[0].pending_id


def waiter(calls: Calls, rules: dict[str, Any] | None = None, **kw: Any) -> AgentConfig:
    return agent("waiter", [calls.tool("gated")], rules or {"default_decision": "ask"}, **kw)


def test_someone_not_among_the_approvers_is_told_privately(build: Build, replies: ResponseUrls) -> None:
    calls = Calls()
    rules = {
        "rules": [{"tool": "gated", "decision": "ask", "approvers": [f"slack:{ALICE}"]}],
        "default_decision": "ask",
    }
    h = build(
        waiter(calls, rules), model=ScriptedModel.from_list([call(use("gated", {"x": 1})), say("done")])
    )
    turn_id, pending = park(h)
    status, body = click(f"approve:{pending}", BOB)
    private = {"response_type": "ephemeral", "replace_original": False, "text": NOT_AN_APPROVER}
    assert (status, body) == (200, private)
    assert [p.message for p in replies.posted] == [private]  # Slack shows it only through response_url
    assert calls.count("gated") == 0 and decided(h.engine, turn_id) == []
    assert click(f"approve:{pending}", ALICE) == (200, replaced(f"Approved by <@{ALICE}>"))
    assert calls.count("gated") == 1
    assert h.engine.turn(turn_id).stop_reason is StopReason.END_TURN


def test_a_question_cannot_be_decided_with_a_button(build: Build) -> None:
    model = ScriptedModel.from_list([call(use("system_ask_user", {"question": "which?"})), say("ok")])
    h = build(waiter(Calls()), model=model)
    turn_id, pending = park(h)
    status, body = click(f"approve:{pending}")
    assert status == 200 and body["response_type"] == "ephemeral"
    assert f"/pending-questions/{pending}/answer" in body["text"]
    assert h.engine.turn(turn_id).status is TurnStatus.PAUSED


def test_a_click_after_cancel_says_cancelled(build: Build) -> None:
    calls = Calls()
    h = build(waiter(calls), model=ScriptedModel.from_list([call(use("gated", {"x": 1})), say("done")]))
    turn_id, pending = park(h)
    h.engine.cancel(turn_id, Decider("admin"))
    assert click(f"approve:{pending}") == (200, replaced("Cancelled"))
    assert calls.count("gated") == 0


@pytest.mark.parametrize("swept", [False, True])
def test_a_click_after_expiry_says_nobody_answered(build: Build, swept: bool) -> None:
    calls = Calls()
    config = waiter(calls, expiry=Expiry(3600.0, "unknown"))
    h = build(config, model=ScriptedModel.from_list([call(use("gated", {"x": 1})), say("too late")]))
    turn_id, pending = park(h)
    h.clock.advance(3601)
    if swept:
        assert h.engine.sweep().expired == 1
    assert click(f"approve:{pending}") == (200, replaced("Expired: nobody answered in time"))
    assert calls.count("gated") == 0
    assert h.engine.turn(turn_id).status is TurnStatus.FINISHED
