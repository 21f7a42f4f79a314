"""The chat channels: Slack (``chat.postMessage``) and Lark (custom bot card), over real HTTP.

A stub server on 127.0.0.1 plays Slack's Web API and Lark's bot webhook: it records every request
(path, headers, JSON body) and answers what the test sets. The end-to-end test at the bottom pauses
a turn on an approval with the Slack notifier pointed at the stub, then sends the posted Approve
button's value back through the api handler as a signed Slack interaction, which resolves it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest

from loopengine.app.ports import Notification
from loopengine.authoring.tools import ASK_USER
from loopengine.channels import base as channels
from loopengine.channels.lark.cards import CardMaker
from loopengine.channels.lark.send import LarkNotifier, sign
from loopengine.channels.magic import token as magic
from loopengine.channels.slack import routes as slack_handler
from loopengine.channels.slack.interact import SlackAction, parse_button_value, parse_interaction, sign_slack
from loopengine.channels.slack.send import SlackNotifier
from loopengine.channels.slack.values import MAX_OPTIONS, ButtonValue, parse_value
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import ConfigError, DeliveryError
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.http import api, root
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.handler_support import call as http
from tests.handler_support import load_event, with_body
from tests.harness import Calls, agent, make_harness
from tests.http_support import Answer, PostServer, Request
from tests.scenario import close
from tests.slack_support import SlackApi

TOKEN = "xoxb-1111-2222-s3cr3tb0tT0k3n"
HOOK_PATH = "/open-apis/bot/v2/hook/h00kt0k3n-5ecret"
LARK_SECRET = "lark-s1gning-secret"
MAGIC_SECRET = "m4gic-link-secret"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
PENDING = "pnd_0123456789abcdef"
APPROVAL: dict[str, Any] = {
    "pendingId": PENDING,
    "turnId": "trn_1",
    "sessionId": "ses_1",
    "agent": "shop",
    "tenant": "",
    "argsHash": "h",
    "reason": "refunds ask <!channel>",
    "tool": "issue_refund",
    "args": {"order_id": "A-1001", "amount": 212.0, "note": '<at user_id="all"></at> & <!here>'},
    "resolveUrl": f"https://loop.example/pending-approvals/{PENDING}/resolve",
}
QUESTION: dict[str, Any] = {
    "pendingId": PENDING,
    "turnId": "trn_1",
    "sessionId": "ses_1",
    "agent": "shop",
    "tenant": "",
    "argsHash": "h",
    "reason": "",
    "question": "Refund or replace?",
    "options": ["refund", "replace <b>"],
    "resolveUrl": f"https://loop.example/pending-questions/{PENDING}/answer",
}
FINISH = {
    "turnId": "trn_1",
    "sessionId": "ses_1",
    "agent": "shop",
    "tenant": "",
    "stopReason": "end_turn",
    "text": "Refunded <!channel>.\nAnything else?",
    "trigger": "message",
}


# -- the stub: Slack's Web API and Lark's webhook on 127.0.0.1 ------------------------------------


class Stub(PostServer):
    """Records every POST; answers ``status`` with ``answer`` (JSON, or raw bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Request] = []
        self.status: int = 200
        self.answer: Any = {"ok": True}
        self.headers: dict[str, str] = {}

    @property
    def base(self) -> str:
        return self.origin

    def respond(self, path: str, headers: dict[str, str], raw: bytes) -> Answer:
        self.requests.append(Request(path, headers, json.loads(raw)))
        answer = self.answer if isinstance(self.answer, bytes) else json.dumps(self.answer).encode()
        return Answer(answer, self.status, headers=self.headers)

    def reset(self, answer: Any) -> None:
        self.requests.clear()
        self.status, self.answer, self.headers = 200, answer, {}


@pytest.fixture(scope="module")
def server() -> Iterator[Stub]:
    with Stub() as stub:
        yield stub


@pytest.fixture
def slack_api(server: Stub) -> Stub:
    server.reset({"ok": True, "channel": "C0OPS", "ts": "1503435956.000247"})
    return server


@pytest.fixture
def lark_hook(server: Stub) -> Stub:
    server.reset({"code": 0, "msg": "success", "data": {}})
    return server


def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def slack_env(stub: Stub) -> dict[str, str]:
    return {"SLACK_BOT_TOKEN": TOKEN, "SLACK_API": f"{stub.base}/api"}


SLACK_BLOCK: dict[str, Any] = {
    "channel": "slack",
    "config": {"channel": "C0OPS", "token_env": "SLACK_BOT_TOKEN", "api_base_env": "SLACK_API"},
}


def slack_notifier(stub: Stub) -> SlackNotifier:
    built = channels.build(SLACK_BLOCK, slack_env(stub), FakeClock())
    assert isinstance(built, SlackNotifier)
    return built


def lark_notifier(stub: Stub, clock: FakeClock | None = None, **config: Any) -> LarkNotifier:
    env = {"LARK_HOOK": stub.base + HOOK_PATH, "LARK_SECRET": LARK_SECRET, magic.SECRET_ENV: MAGIC_SECRET}
    block = {"channel": "lark", "config": {"webhook_url_env": "LARK_HOOK", **config}}
    built = channels.build(block, env, clock or FakeClock())
    assert isinstance(built, LarkNotifier)
    return built


def buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]


# -- Slack ----------------------------------------------------------------------------------


def test_slack_approval_is_a_chat_post_message_with_the_buttons_the_route_reads(slack_api: Stub) -> None:
    where = slack_notifier(slack_api).send(Notification("approval", APPROVAL))
    assert where == "slack #C0OPS"
    [request] = slack_api.requests
    assert request.path == "/api/chat.postMessage"
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["content-type"].startswith("application/json")
    body = request.body
    assert body["channel"] == "C0OPS" and body["text"] == "Approval needed: issue_refund"
    approve, deny = buttons(body["blocks"])
    # the values round-trip through the receiving side's parser, to this pendingId
    assert parse_button_value(approve["value"]) == ("approve", PENDING)
    assert parse_button_value(deny["value"]) == ("deny", PENDING)
    click = {"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": [deny]}
    action = parse_interaction(urlencode({"payload": json.dumps(click)}).encode())
    assert isinstance(action, SlackAction)
    assert (action.decision, action.pending_id) == ("deny", PENDING)
    # what the model wrote cannot mention anyone
    text = json.dumps(body)
    assert "<!channel>" not in text and "<!here>" not in text and "&lt;!channel&gt;" in text


def test_slack_question_has_a_button_per_option_and_one_to_type_an_answer(slack_api: Stub) -> None:
    slack_notifier(slack_api).send(Notification("question", QUESTION))
    [request] = slack_api.requests
    body = request.body
    assert body["text"] == "Question: Refund or replace?"
    refund, replace, typed = buttons(body["blocks"])
    # a button names its option by number; the route answers with the pending item's text for it
    assert [b["text"] for b in (refund, replace, typed)] == [
        {"type": "plain_text", "text": "refund"},
        {"type": "plain_text", "text": "replace <b>"},  # plain_text: shown as written, never markup
        {"type": "plain_text", "text": "Type an answer"},
    ]
    assert [parse_value(b["value"]) for b in (refund, replace, typed)] == [
        ButtonValue("answer", PENDING, 0),
        ButtonValue("answer", PENDING, 1),
        ButtonValue("text", PENDING),
    ]
    text = json.dumps(body["blocks"], ensure_ascii=False)
    assert "Refund or replace?" in text and QUESTION["resolveUrl"] in text and PENDING in text


def test_slack_question_with_too_many_options_lists_them(slack_api: Stub) -> None:
    many = [f"option {i} <!here>" for i in range(MAX_OPTIONS + 1)]
    slack_notifier(slack_api).send(Notification("question", {**QUESTION, "options": many}))
    body = slack_api.requests[0].body
    [typed] = buttons(body["blocks"])
    assert parse_value(typed["value"]) == ButtonValue("text", PENDING)
    text = json.dumps(body["blocks"], ensure_ascii=False)
    assert "• option 20 &lt;!here&gt;" in text and "<!here>" not in text


def test_slack_messages_keep_to_slacks_documented_limits(tmp_path: Path) -> None:
    # the stand-in refuses what Slack documents it would refuse (block and element limits, auth)
    huge = {**APPROVAL, "args": {"note": "x" * 10_000}, "reason": "r" * 5000}
    long_options = {**QUESTION, "question": "q" * 5000, "options": ["o" * 500, "p" * 2000]}
    with SlackApi(TOKEN) as api:
        notifier = SlackNotifier("C0OPS", TOKEN, api_base=api.base)
        for event, payload in [("approval", huge), ("question", long_options), ("question", QUESTION)]:
            notifier.send(Notification(event, payload))
        assert api.refused == [] and len(api.calls("chat.postMessage")) == 3
        with pytest.raises(DeliveryError, match="invalid_auth"):
            SlackNotifier("C0OPS", "xoxb-wrong", api_base=api.base).send(Notification("question", QUESTION))


@pytest.mark.parametrize(
    ("event", "payload", "expected"),
    [
        ("run_start", {**FINISH, "trigger": "schedule"}, "Run started: `shop` (schedule), turn `trn_1`"),
        (
            "run_finish",
            FINISH,
            "Run finished: `shop` (end_turn), turn `trn_1`\n> Refunded &lt;!channel&gt;.\n> Anything else?",
        ),
    ],
)
def test_slack_run_events_are_one_short_text(
    slack_api: Stub, event: str, payload: dict[str, Any], expected: str
) -> None:
    slack_notifier(slack_api).send(Notification(event, payload))
    [request] = slack_api.requests
    assert request.body == {"channel": "C0OPS", "text": expected}


def test_slack_refusal_is_a_delivery_error_naming_the_code_not_the_token(slack_api: Stub) -> None:
    slack_api.answer = {"ok": False, "error": "channel_not_found"}
    with pytest.raises(DeliveryError, match="channel_not_found") as info:
        slack_notifier(slack_api).send(Notification("approval", APPROVAL))
    assert TOKEN not in str(info.value) and "s3cr3t" not in str(info.value)
    assert str(info.value).startswith("slack #C0OPS: chat.postMessage at http://127.0.0.1:")


@pytest.mark.parametrize(
    ("status", "answer", "headers", "message"),
    [
        (500, {"ok": False}, {}, "answered 500 Internal Server Error"),
        (
            429,
            {"ok": False, "error": "ratelimited"},
            {"Retry-After": "30"},
            "answered 429 Too Many Requests \\(retry after 30 s\\)",
        ),
        (302, b"", {"Location": "https://evil.example/"}, "answered 302 Found"),
        (200, b"<html>not json</html>", {}, "without Slack's JSON"),
        (200, {"ok": False, "error": f"bad {TOKEN}"}, {}, "refused the message: bad \\[redacted\\]"),
    ],
)
def test_slack_failures_are_delivery_errors(
    slack_api: Stub, status: int, answer: Any, headers: dict[str, str], message: str
) -> None:
    slack_api.status, slack_api.answer, slack_api.headers = status, answer, headers
    with pytest.raises(DeliveryError, match=message) as info:
        slack_notifier(slack_api).send(Notification("approval", APPROVAL))
    assert TOKEN not in str(info.value) and info.value.__cause__ is None
    assert len(slack_api.requests) == 1  # redirects are not followed


def test_slack_connection_refused_is_a_delivery_error() -> None:
    notifier = SlackNotifier("C0OPS", TOKEN, api_base=f"http://127.0.0.1:{closed_port()}/api")
    with pytest.raises(DeliveryError, match="ConnectError") as info:
        notifier.send(Notification("run_start", FINISH))
    assert TOKEN not in str(info.value) and TOKEN not in repr(notifier)


def test_slack_payloads_it_cannot_post_send_nothing(slack_api: Stub) -> None:
    notifier = slack_notifier(slack_api)
    for event, payload in [
        ("nonsense", APPROVAL),
        ("approval", {**APPROVAL, "pendingId": "bad id"}),
        ("approval", {**APPROVAL, "args": None}),
        ("question", {**QUESTION, "pendingId": None}),
    ]:
        with pytest.raises(DeliveryError, match="cannot post"):
            notifier.send(Notification(event, payload))
    assert slack_api.requests == []


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        ({"channel": "C0OPS", "token": TOKEN}, {}, "token_env"),  # inline secrets are refused
        ({"channel": "C0OPS", "token_env": "MISSING"}, {}, "token_env"),
        ({"token_env": "T"}, {"T": TOKEN}, "channel"),
        (
            {"channel": "C0OPS", "token_env": "T", "api_base": "http://slack.example/api"},
            {"T": TOKEN},
            "https",
        ),
        ({"channel": "C0OPS", "token_env": "T", "api_base": "ftp://127.0.0.1/api"}, {"T": TOKEN}, "https"),
    ],
)
def test_slack_config_errors(config: dict[str, Any], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        channels.build({"channel": "slack", "config": config}, env, FakeClock())
    assert TOKEN not in str(info.value)


def test_slack_defaults_to_slack_com() -> None:
    notifier = channels.build(
        {"channel": "slack", "config": {"channel": "#ops", "token_env": "T"}}, {"T": TOKEN}, FakeClock()
    )
    assert isinstance(notifier, SlackNotifier) and notifier.destination == "slack #ops"
    assert notifier._url == "https://slack.com/api/chat.postMessage"


# -- Lark -----------------------------------------------------------------------------------


def card_texts(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Every text object in a card (header, divs, notes, buttons)."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "tag" in node and "content" in node:
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(card)
    return found


def test_lark_approval_card_links_to_the_resolve_url(lark_hook: Stub) -> None:
    notifier = lark_notifier(lark_hook)
    assert notifier.send(Notification("approval", APPROVAL)) == f"lark {lark_hook.base}"
    [request] = lark_hook.requests
    assert request.path == HOOK_PATH and request.headers["content-type"].startswith("application/json")
    body = request.body
    assert set(body) == {"msg_type", "card"} and body["msg_type"] == "interactive"  # unsigned
    card = body["card"]
    assert card["header"]["title"] == {"tag": "plain_text", "content": "Approval needed: issue_refund"}
    [actions] = [e for e in card["elements"] if e["tag"] == "action"]
    approve, deny = actions["actions"]
    assert (approve["text"]["content"], approve["type"], approve["url"]) == (
        "Approve…",
        "primary",
        APPROVAL["resolveUrl"],
    )
    assert (deny["type"], deny["url"]) == ("danger", APPROVAL["resolveUrl"])
    text = json.dumps(card, ensure_ascii=False)
    assert "refunds ask" in text and PENDING in text and "POST" in text
    [arguments] = [e["text"]["content"] for e in card["elements"] if e["tag"] == "div"][1:]
    assert arguments.startswith("Arguments:\n") and json.loads(arguments[11:]) == APPROVAL["args"]
    # model-written text is only ever plain_text: no <at> mention, no markdown link can work
    assert {t["tag"] for t in card_texts(card)} == {"plain_text"}


def test_lark_signature_is_hmac_keyed_by_timestamp_and_secret(lark_hook: Stub) -> None:
    clock = FakeClock(1_599_360_473.7)
    lark_notifier(lark_hook, clock, secret_env="LARK_SECRET").send(Notification("approval", APPROVAL))
    [request] = lark_hook.requests
    key = f"1599360473\n{LARK_SECRET}".encode()
    expected = base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    assert request.body["timestamp"] == "1599360473"
    assert request.body["sign"] == expected == sign(LARK_SECRET, 1_599_360_473)
    assert LARK_SECRET not in json.dumps(request.body)


def test_lark_magic_links_open_the_decision_page(lark_hook: Stub) -> None:
    clock = FakeClock()
    notifier = lark_notifier(lark_hook, clock, magic_link_recipient="lark-ops", magic_link_ttl_seconds=3600)
    notifier.send(Notification("approval", APPROVAL))
    notifier.send(Notification("question", QUESTION))
    approval, question = (r.body["card"] for r in lark_hook.requests)
    [approve, deny] = next(e for e in approval["elements"] if e["tag"] == "action")["actions"]
    [answer] = next(e for e in question["elements"] if e["tag"] == "action")["actions"]
    assert approve["url"] == deny["url"] and answer["text"]["content"] == "Answer…"
    for url in (approve["url"], answer["url"]):
        base, _, token = url.rpartition("/")
        assert base == "https://loop.example/magic"
        claims = magic.verify_token(MAGIC_SECRET, token, clock.now())
        assert (claims.pending_id, claims.recipient, claims.expires_at) == (
            PENDING,
            "lark-ops",
            int(clock.now() + 3600),
        )


def test_lark_question_and_run_cards(lark_hook: Stub) -> None:
    notifier = lark_notifier(lark_hook)
    notifier.send(Notification("question", QUESTION))
    notifier.send(Notification("run_finish", FINISH))
    notifier.send(Notification("run_start", FINISH))
    question, finish, start = (r.body["card"] for r in lark_hook.requests)
    assert question["header"]["title"]["content"] == "Question from shop"
    text = json.dumps(question, ensure_ascii=False)
    assert "Refund or replace?" in text and "• replace <b>" in text and QUESTION["resolveUrl"] in text
    assert finish["header"]["template"] == "green" and "Refunded <!channel>." in json.dumps(finish)
    assert start["header"]["title"]["content"] == "Run started: shop"
    for card in (question, finish, start):
        assert {t["tag"] for t in card_texts(card)} == {"plain_text"}


def test_lark_non_zero_code_is_a_delivery_error(lark_hook: Stub) -> None:
    lark_hook.answer = {
        "code": 19021,
        "msg": "sign match fail or timestamp is not within one hour",
        "data": {},
    }
    with pytest.raises(DeliveryError, match="code 19021 sign match fail") as info:
        lark_notifier(lark_hook, secret_env="LARK_SECRET").send(Notification("approval", APPROVAL))
    message = str(info.value)
    assert "h00kt0k3n" not in message and LARK_SECRET not in message
    assert message.startswith(f"lark {lark_hook.base} refused the card")


@pytest.mark.parametrize(
    ("status", "answer", "message"),
    [
        (500, b"oops", "answered 500 Internal Server Error"),
        (400, {"code": 9499, "msg": "Bad Request"}, "answered 400 Bad Request \\(code 9499 Bad Request\\)"),
        (200, b"not json", "without Lark's JSON"),
        (200, {"msg": "success"}, "without Lark's JSON"),
        (200, {"code": 19024, "msg": f"Key Words Not Found {HOOK_PATH}"}, "code 19024 Key Words Not Found"),
    ],
)
def test_lark_failures_are_delivery_errors(lark_hook: Stub, status: int, answer: Any, message: str) -> None:
    lark_hook.status, lark_hook.answer = status, answer
    with pytest.raises(DeliveryError, match=message) as info:
        lark_notifier(lark_hook).send(Notification("run_start", FINISH))
    assert "h00kt0k3n" not in str(info.value) and info.value.__cause__ is None


def test_lark_connection_refused_is_a_delivery_error() -> None:
    url = f"http://127.0.0.1:{closed_port()}{HOOK_PATH}"
    notifier = LarkNotifier(url, cards=CardMaker(clock=FakeClock()), secret=LARK_SECRET)
    with pytest.raises(DeliveryError, match="ConnectError") as info:
        notifier.send(Notification("approval", APPROVAL))
    assert "h00kt0k3n" not in str(info.value) and "h00kt0k3n" not in repr(notifier)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"webhook_url": "https://open.larksuite.com/open-apis/bot/v2/hook/x"}, "webhook_url_env"),
        ({"webhook_url_env": "LARK_HOOK", "secret": LARK_SECRET}, "secret_env"),
        ({"webhook_url_env": "LARK_HOOK", "secret_env": "UNSET"}, "secret_env"),
        ({"webhook_url_env": "UNSET"}, "webhook_url_env"),
        ({"webhook_url_env": "PLAIN_HTTP"}, "https"),
        ({"webhook_url_env": "LARK_HOOK", "magic_link_recipient": ""}, "magic_link_recipient"),
        ({"webhook_url_env": "LARK_HOOK", "magic_link_ttl_seconds": 0}, "magic_link_ttl_seconds"),
    ],
)
def test_lark_config_errors(config: dict[str, Any], message: str) -> None:
    env = {
        "LARK_HOOK": f"https://open.larksuite.com{HOOK_PATH}",
        "PLAIN_HTTP": f"http://open.larksuite.com{HOOK_PATH}",
    }
    with pytest.raises(ConfigError, match=message) as info:
        channels.build({"channel": "lark", "config": config}, env, FakeClock())
    assert "h00kt0k3n" not in str(info.value) and LARK_SECRET not in str(info.value)


def test_lark_magic_links_need_the_magic_link_secret() -> None:
    env = {"LARK_HOOK": f"https://open.larksuite.com{HOOK_PATH}"}
    config = {"webhook_url_env": "LARK_HOOK", "magic_link_recipient": "lark-ops"}
    with pytest.raises(ConfigError, match=magic.SECRET_ENV):
        channels.build({"channel": "lark", "config": config}, env, FakeClock())


# -- end to end: pause, post to "Slack", click Approve, resolved ----------------------------


REFUND_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_id", "amount"],
}


def signed_click(button: dict[str, Any], block_id: str, user: str, now: int) -> dict[str, Any]:
    """events/slack_interaction.json carrying a click on ``button``, signed as Slack would."""
    event = load_event("slack_interaction")
    [raw] = parse_qs(event["body"])["payload"]
    payload = json.loads(raw)
    payload["user"]["id"] = user
    payload["actions"] = [{**button, "block_id": block_id, "action_ts": str(now)}]
    payload.pop("response_url", None)  # no message update to POST in this test
    body = urlencode({"payload": json.dumps(payload)}).encode()
    event = with_body(event, body.decode())
    event["headers"] = {
        **event["headers"],
        "content-length": str(len(body)),
        "x-slack-request-timestamp": str(now),
        "x-slack-signature": sign_slack(SIGNING_SECRET, body, now),
    }
    return event


@pytest.fixture
def slack_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(slack_handler.SECRET_ENV, SIGNING_SECRET)
    monkeypatch.setenv(slack_handler.TEAM_ENV, "T00000000")  # the workspace of the sample event
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "loopengine-test")
    yield
    root.install(None)


def test_an_approval_posted_to_slack_is_resolved_by_its_approve_button(
    slack_api: Stub,
    slack_app: None,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls = Calls()
    block = {**SLACK_BLOCK, "events": ["approval", "run_finish"]}
    shop = agent(
        "shop", [calls.tool("issue_refund", REFUND_SCHEMA)], {"default_decision": "ask"}, notifier=block
    )
    model = ScriptedModel.from_list(
        [call(use("issue_refund", {"order_id": "A-1001", "amount": 212.0}, id="r1")), say("Refunded.")]
    )
    h = make_harness(tmp_path / "e2e.db", shop, model=model)
    env = slack_env(slack_api)
    h.rt.notifier_for = lambda c: channels.build(c.notifier or {}, env, h.clock)
    root.install(h.engine)
    try:
        # GIVEN a turn paused on the refund, its approval posted to the channel
        out = h.engine.send_message("shop", "order A-1001 arrived broken")
        assert out.status is TurnStatus.PAUSED
        [item] = out.pending
        [post] = slack_api.requests
        assert post.path == "/api/chat.postMessage" and post.body["channel"] == "C0OPS"
        assert post.headers["authorization"] == f"Bearer {TOKEN}"
        [notified] = [e for e in h.rt.stores.turns.events(out.turn_id) if e["type"] == "notified"]
        assert (notified["notification"], notified["channel"]) == ("approval", "slack #C0OPS")
        # WHEN Alice clicks the posted Approve button and Slack calls the interactions route
        [actions] = [b for b in post.body["blocks"] if b["type"] == "actions"]
        approve = next(e for e in actions["elements"] if e["action_id"] == "approve")
        event = signed_click(approve, actions["block_id"], "U0ALICE", int(h.clock.now()))
        status, reply = http(api.handler, event)
        # THEN that item is approved by her, the refund runs once and the turn finishes
        assert (status, reply) == (200, {"replace_original": True, "text": "Approved by <@U0ALICE>"})
        assert calls.count("issue_refund") == 1
        finished = h.engine.turn(out.turn_id)
        assert finished.status is TurnStatus.FINISHED and finished.stop_reason is StopReason.END_TURN
        [decided] = [e for e in h.rt.stores.turns.events(out.turn_id) if e["type"] == "decided"]
        assert (decided["pendingId"], decided["decidedBy"], decided["channel"]) == (
            item.pending_id,
            "slack:U0ALICE",
            "slack",
        )
        # AND the finish went to the channel too (run_start was not asked for)
        assert [r.body["text"].splitlines()[0] for r in slack_api.requests[1:]] == [
            f"Run finished: `shop` (end_turn), turn `{out.turn_id}`"
        ]
        captured = capsys.readouterr()
        assert TOKEN not in captured.out + captured.err and TOKEN not in caplog.text
    finally:
        close(h)


def test_a_refused_slack_post_is_recorded_without_the_token_and_the_turn_still_pauses(
    slack_api: Stub, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    slack_api.answer = {"ok": False, "error": "not_in_channel"}
    shop = agent("shop", [Calls().tool("issue_refund", REFUND_SCHEMA)], {"default_decision": "ask"})
    model = ScriptedModel.from_list([call(use(ASK_USER, {"question": "Which order?"}, id="q1")), say("ok")])
    h = make_harness(tmp_path / "refused.db", shop, model=model)
    env = slack_env(slack_api)
    h.rt.notifier_for = lambda _c: channels.build(SLACK_BLOCK, env, h.clock)
    try:
        out = h.engine.send_message("shop", "refund please")
        assert out.status is TurnStatus.PAUSED and out.pending[0].kind == "question"
        failed = [e for e in h.rt.stores.turns.events(out.turn_id) if e["type"] == "notification_failed"]
        assert [f["notification"] for f in failed] == ["run_start", "question"]
        assert all("not_in_channel" in f["error"] and TOKEN not in f["error"] for f in failed)
        captured = capsys.readouterr()
        assert TOKEN not in captured.out + captured.err and TOKEN not in caplog.text
    finally:
        close(h)
