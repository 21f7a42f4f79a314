"""Lark cards with callback buttons, the app's bot that sends them, and a click on a posted card.

A stub on 127.0.0.1 plays Lark's open API (the tenant token and ``im/v1/messages``) over real HTTP.
The end-to-end tests pause a turn with the app notifier pointed at the stub, take the button the
posted card carries, and send it back through the api handler as Lark would (encrypted, signed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopengine.app.ports import Notification
from loopengine.authoring.tools import ASK_USER
from loopengine.channels import base as channels
from loopengine.channels.lark import routes as lark_route
from loopengine.channels.lark.app import LarkAppNotifier
from loopengine.channels.lark.cards import CardMaker, button_value, parse_button_value
from loopengine.channels.magic import token as magic
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import ConfigError, DeliveryError, InvalidInput
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.http import api, root
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.handler_support import call as http
from tests.harness import Calls, agent, make_harness
from tests.http_support import Answer, PostServer, Request
from tests.lark_support import ALICE, APP_ID, BOB, KEY, TOKEN, action, lark_event
from tests.scenario import close

APP_SECRET = "l4rk-app-s3cret"
TENANT_TOKEN = "t-g1044ghJRUIJJ5ELPZ5GMX2HEDMQMTBLC"
MAGIC_SECRET = "m4gic-link-secret"
PENDING = "pnd_0123456789abcdef"
APPROVAL = {
    "pendingId": PENDING,
    "agent": "shop",
    "tool": "issue_refund",
    "args": {"order_id": "A-1001", "amount": 212.0},
    "reason": "refunds ask",
    "resolveUrl": f"https://loop.example/pending-approvals/{PENDING}/resolve",
}
QUESTION = {
    "pendingId": PENDING,
    "agent": "shop",
    "question": "Refund or replace?",
    "options": ["refund", "replace <b>"],
    "resolveUrl": f"https://loop.example/pending-questions/{PENDING}/answer",
}


def actions(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for e in card["elements"] if e["tag"] == "action" for a in e["actions"]]


def texts(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        found = [node] if "tag" in node and "content" in node else []
        return found + [t for v in node.values() for t in texts(v)]
    return [t for v in node for t in texts(v)] if isinstance(node, list) else []


# -- the cards ------------------------------------------------------------------------------------


def test_a_callback_approval_card_carries_buttons_the_route_reads() -> None:
    cards = CardMaker(clock=FakeClock(), callback=True)
    card = cards.card("approval", APPROVAL)
    approve, deny = actions(card)  # no page without magic links: the resolve route is no page
    assert (approve["text"]["content"], approve["type"], deny["type"]) == ("Approve", "primary", "danger")
    assert parse_button_value(approve["value"]) == ("approve", PENDING, None)
    assert parse_button_value(deny["value"]) == ("deny", PENDING, None)
    assert "url" not in approve and card["config"]["update_multi"] is True
    assert {t["tag"] for t in texts(card)} == {"plain_text"}


def test_magic_links_stay_the_fallback_beside_the_callback_buttons() -> None:
    clock = FakeClock()
    cards = CardMaker(clock=clock, magic_secret=MAGIC_SECRET, magic_recipient="lark-ops", callback=True)
    *_, review = actions(cards.card("approval", APPROVAL))
    base, _, token = review["url"].rpartition("/")
    assert review["text"]["content"] == "Review…" and base == "https://loop.example/magic"
    assert magic.verify_token(MAGIC_SECRET, token, clock.now()).pending_id == PENDING


def test_a_question_gets_one_button_per_option_and_a_page_for_free_text() -> None:
    cards = CardMaker(clock=FakeClock(), magic_secret=MAGIC_SECRET, magic_recipient="lark-ops", callback=True)
    card = cards.card("question", QUESTION)
    refund, replace, free = actions(card)
    assert [parse_button_value(b["value"]) for b in (refund, replace)] == [
        ("answer", PENDING, "refund"),
        ("answer", PENDING, "replace <b>"),  # the option's text, verbatim
    ]
    assert free["text"]["content"] == "Answer…" and "/magic/" in free["url"]
    assert {t["tag"] for t in texts(card)} == {"plain_text"}


def test_too_many_or_too_long_options_are_listed_not_buttoned() -> None:
    cards = CardMaker(clock=FakeClock(), callback=True)
    for options in ([f"o{i}" for i in range(11)], ["x" * 2001], ["ok", "  "]):
        card = cards.card("question", {**QUESTION, "options": options})
        assert actions(card) == [] and "Options:" in json.dumps(card)


def test_long_option_labels_are_clipped_but_the_answer_is_whole() -> None:
    option = "a very long option " * 10
    [button] = actions(
        CardMaker(clock=FakeClock(), callback=True).card("question", {**QUESTION, "options": [option]})
    )
    assert len(button["text"]["content"]) <= 60 and button["value"]["answer"] == option


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=2000).filter(str.strip))
def test_property_any_option_round_trips_through_a_button(option: str) -> None:
    assert parse_button_value(json.loads(json.dumps(button_value("answer", "pnd_1", option)))) == (
        "answer",
        "pnd_1",
        option,
    )


def test_button_values_refuse_bad_input() -> None:
    with pytest.raises(ValueError):
        button_value("approve", "pnd 1")
    with pytest.raises(ValueError):
        button_value("answer", "pnd_1")  # an answer button needs its answer
    with pytest.raises(InvalidInput):
        parse_button_value({"decision": "answer", "pendingId": "pnd_1", "answer": "x" * 2001})


def test_a_custom_bot_cannot_have_callback_buttons() -> None:
    env = {"LARK_HOOK": "https://open.larksuite.com/open-apis/bot/v2/hook/x"}
    config = {"webhook_url_env": "LARK_HOOK", "callback": True}
    with pytest.raises(ConfigError, match="chat_id"):
        channels.build({"channel": "lark", "config": config}, env, FakeClock())


# -- Lark's open API on 127.0.0.1 --------------------------------------------------------------------


class OpenApi(PostServer):
    """Answers ``.../internal`` (the tenant token) and ``.../messages``; records every request."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Request] = []
        self.answers: dict[str, Any] = {}

    @property
    def base(self) -> str:
        return f"{self.origin}/open-apis"

    def respond(self, path: str, headers: dict[str, str], raw: bytes) -> Answer:
        self.requests.append(Request(path, headers, json.loads(raw)))
        return Answer(json.dumps(self.answers.get(path.partition("?")[0].rsplit("/", 1)[-1], {})).encode())

    def reset(self) -> None:
        self.requests.clear()
        self.answers = {
            "internal": {"code": 0, "msg": "ok", "tenant_access_token": TENANT_TOKEN, "expire": 7200},
            "messages": {
                "code": 0,
                "msg": "success",
                "data": {"message_id": "om_dc13264520392913993dd051dba21dcf"},
            },
        }

    def posted_cards(self) -> list[dict[str, Any]]:
        return [json.loads(r.body["content"]) for r in self.requests if r.path.startswith("/open-apis/im/")]


@pytest.fixture(scope="module")
def open_api_server() -> Iterator[OpenApi]:
    with OpenApi() as stub:
        yield stub


@pytest.fixture
def open_api(open_api_server: OpenApi) -> OpenApi:
    open_api_server.reset()
    return open_api_server


def block(stub: OpenApi, **config: Any) -> dict[str, Any]:
    return {
        "channel": "lark",
        "config": {"chat_id": "oc_ops", "app_secret_env": "LARK_APP_SECRET", "api_base": stub.base, **config},
    }


ENV = {"LARK_APP_SECRET": APP_SECRET, lark_route.APP_ID_ENV: APP_ID, magic.SECRET_ENV: MAGIC_SECRET}


def app_notifier(stub: OpenApi, clock: FakeClock | None = None, **config: Any) -> LarkAppNotifier:
    built = channels.build(block(stub, **config), ENV, clock or FakeClock())
    assert isinstance(built, LarkAppNotifier)
    return built


# -- the app's bot ------------------------------------------------------------------------------------


def test_the_app_bot_gets_a_token_and_posts_the_card_to_the_chat(open_api: OpenApi) -> None:
    notifier = app_notifier(open_api, callback=True)
    assert notifier.send(Notification("approval", APPROVAL)) == f"lark app {APP_ID} chat oc_ops"
    token, message = open_api.requests
    assert token.path == "/open-apis/auth/v3/tenant_access_token/internal"
    assert token.body == {"app_id": APP_ID, "app_secret": APP_SECRET}
    assert message.path == "/open-apis/im/v1/messages?receive_id_type=chat_id"
    assert message.headers["authorization"] == f"Bearer {TENANT_TOKEN}"
    assert (message.body["receive_id"], message.body["msg_type"]) == ("oc_ops", "interactive")
    [card] = open_api.posted_cards()  # content is the card as a JSON string, as Lark's API wants
    assert card == notifier.cards.card("approval", APPROVAL)


def test_the_token_is_kept_until_shortly_before_it_expires(open_api: OpenApi) -> None:
    clock = FakeClock()
    notifier = app_notifier(open_api, clock)
    for _ in range(3):
        notifier.send(Notification("question", QUESTION))
    assert [r.path.rsplit("/", 1)[-1] for r in open_api.requests].count("internal") == 1
    clock.advance(7200 - 600)  # within the refresh margin: a new token
    notifier.send(Notification("question", QUESTION))
    assert [r.path.rsplit("/", 1)[-1] for r in open_api.requests].count("internal") == 2


def test_a_refused_message_is_a_delivery_error_and_drops_the_token(open_api: OpenApi) -> None:
    notifier = app_notifier(open_api)
    open_api.answers["messages"] = {"code": 99991663, "msg": f"Invalid access token {TENANT_TOKEN}"}
    with pytest.raises(DeliveryError, match="code 99991663") as info:
        notifier.send(Notification("approval", APPROVAL))
    assert TENANT_TOKEN not in str(info.value) and APP_SECRET not in str(info.value)
    open_api.reset()
    notifier.send(Notification("approval", APPROVAL))
    assert open_api.requests[0].path.endswith("/internal")  # asked again


def test_a_refused_token_is_a_delivery_error_without_the_secret(open_api: OpenApi) -> None:
    open_api.answers["internal"] = {"code": 10014, "msg": f"app secret invalid: {APP_SECRET}"}
    with pytest.raises(DeliveryError, match="code 10014") as info:
        app_notifier(open_api).send(Notification("approval", APPROVAL))
    assert APP_SECRET not in str(info.value) and len(open_api.requests) == 1


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        ({"app_secret": APP_SECRET}, ENV, "app_secret_env"),
        ({"app_secret_env": "UNSET"}, ENV, "app_secret_env"),
        ({"chat_id": ""}, ENV, "chat_id"),
        ({}, {"LARK_APP_SECRET": APP_SECRET}, "LOOPENGINE_LARK_APP_ID"),
        ({"api_base": "http://open.larksuite.com/open-apis"}, ENV, "https"),
        ({"webhook_url_env": "LARK_HOOK"}, ENV, "not both"),
        ({"callback": "yes"}, ENV, "callback"),
    ],
)
def test_app_bot_config_errors(
    open_api: OpenApi, config: dict[str, Any], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        channels.build(block(open_api, **config), env, FakeClock())
    assert APP_SECRET not in str(info.value)


# -- end to end: pause, post to "Lark", click the posted button, decided --------------------------------


REFUND_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_id", "amount"],
}


@pytest.fixture
def lark_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in (
        (lark_route.APP_ID_ENV, APP_ID),
        (lark_route.TOKEN_ENV, TOKEN),
        (lark_route.ENCRYPT_KEY_ENV, KEY),
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "loopengine-test")
    yield
    root.install(None)


def clicked(button: dict[str, Any], open_id: str, now: float) -> tuple[int, dict[str, Any]]:
    """Lark's callback for a click on ``button`` of a posted card, through the api handler."""
    return http(api.handler, lark_event(action(button["value"], open_id), now))


def test_an_approval_posted_by_the_app_is_decided_by_its_approve_button(
    open_api: OpenApi, lark_app: None, tmp_path: Path
) -> None:
    calls = Calls()
    notify = {**block(open_api, callback=True), "events": ["approval"]}
    shop = agent(
        "shop", [calls.tool("issue_refund", REFUND_SCHEMA)], {"default_decision": "ask"}, notifier=notify
    )
    model = ScriptedModel.from_list(
        [call(use("issue_refund", {"order_id": "A-1001", "amount": 212.0})), say("Done.")]
    )
    h = make_harness(tmp_path / "lark.db", shop, model=model)
    h.rt.notifier_for = lambda c: channels.build(c.notifier or {}, ENV, h.clock)
    root.install(h.engine)
    try:
        # GIVEN a turn paused on the refund, its card posted to the chat by the app's bot
        out = h.engine.send_message("shop", "order A-1001 arrived broken")
        assert out.status is TurnStatus.PAUSED
        [card] = open_api.posted_cards()
        approve = next(b for b in actions(card) if b["text"]["content"] == "Approve")
        # WHEN Alice clicks Approve and Lark calls the interaction route
        status, reply = clicked(approve, ALICE, h.clock.now())
        # THEN it is approved by her, the refund runs once and the turn finishes
        assert status == 200 and reply["toast"]["content"] == f"Approved by lark:{ALICE}"
        assert calls.count("issue_refund") == 1
        turn = h.engine.turn(out.turn_id)
        assert turn.status is TurnStatus.FINISHED and turn.stop_reason is StopReason.END_TURN
        # AND Bob's later click on the same card decides nothing
        assert clicked(approve, BOB, h.clock.now())[1]["toast"]["type"] == "info"
        assert calls.count("issue_refund") == 1
    finally:
        close(h)


def test_a_question_posted_by_the_app_is_answered_by_an_option_button(
    open_api: OpenApi, lark_app: None, tmp_path: Path
) -> None:
    shop = agent("shop", [], {"default_decision": "ask"}, notifier=block(open_api, callback=True))
    question = {"question": "Refund or replace?", "options": ["refund", "replace"]}
    model = ScriptedModel.from_list([call(use(ASK_USER, question)), say("Replacing it.")])
    h = make_harness(tmp_path / "lark-q.db", shop, model=model)
    h.rt.notifier_for = lambda c: channels.build(c.notifier or {}, ENV, h.clock)
    root.install(h.engine)
    try:
        out = h.engine.send_message("shop", "it broke")
        card = next(
            c for c in open_api.posted_cards() if c["header"]["title"]["content"] == "Question from shop"
        )
        replace = next(b for b in actions(card) if b["text"]["content"] == "replace")
        status, reply = clicked(replace, BOB, h.clock.now())
        assert status == 200 and reply["toast"]["content"] == f"Answered by lark:{BOB}"
        turn = h.engine.turn(out.turn_id)
        assert turn.status is TurnStatus.FINISHED and turn.stop_reason is StopReason.END_TURN
        [decided] = [e for e in h.rt.stores.turns.events(out.turn_id) if e["type"] == "decided"]
        assert (decided["decidedBy"], decided["decision"]) == (f"lark:{BOB}", "answer")
    finally:
        close(h)
