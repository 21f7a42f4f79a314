"""Questions in Slack, and the Slack route failing closed.

A question's message has a button per option and "Type an answer". An option button answers with
the option's text *as the pending item holds it* (the button names only its number). "Type an
answer" opens a modal through ``views.open``, played by a local stand-in of Slack's Web API that
refuses what Slack documents it would (tests/slack_support.py); the modal's ``view_submission``
comes back to the same route and answers. Every answer is recorded as decided by ``slack:<user>``
via ``slack``. A late click or submission shows what became of the item. Without
``LOOPENGINE_SLACK_TEAM_ID`` every request is 403 and nothing is decided.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopengine.channels.slack import blocks, views
from loopengine.channels.slack import routes as route
from loopengine.channels.slack.interact import SlackSubmission, parse_interaction
from loopengine.channels.slack.values import MAX_OPTIONS, ButtonValue, button_value, parse_value
from loopengine.domain.base.errors import ConfigError, DeliveryError, InvalidInput
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.http import api
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.handler_support import call as http
from tests.handler_support import load_event, with_auth, with_body
from tests.harness import Build, Calls, Harness, agent
from tests.slack_support import ResponseUrls, SlackApi, check_blocks, check_modal, signed_event

SECRET = "slack-questions-signing-secret-0123"
TOKEN = "xoxb-1111-2222-qu3st10nb0tT0k3n"
TEAM = "T0QUESTIONS"
ALICE, BOB = "U0ALICE", "U0BOB"
OPTIONS = ["refund", "replace <!channel>"]
Reply = tuple[int, dict[str, Any]]


@pytest.fixture(scope="module")
def slack_api() -> Iterator[SlackApi]:
    with SlackApi(TOKEN) as stand_in:
        yield stand_in


@pytest.fixture(scope="module")
def receiver() -> Iterator[ResponseUrls]:
    with ResponseUrls() as rx:
        yield rx


@pytest.fixture
def replies(receiver: ResponseUrls) -> ResponseUrls:
    receiver.reset()
    return receiver


@pytest.fixture
def h(install_harness: Build, slack_api: SlackApi, monkeypatch: pytest.MonkeyPatch) -> Harness:
    """A turn-ready harness whose model asks a question (options; free text allowed), then says what it got"""
    for name, value in {
        route.SECRET_ENV: SECRET,
        route.TEAM_ENV: TEAM,
        route.BOT_TOKEN_ENV: TOKEN,
        route.API_BASE_ENV: slack_api.base,
    }.items():
        monkeypatch.setenv(name, value)
    slack_api.requests.clear()
    slack_api.refused.clear()
    question = {"question": "Refund or replace <@U0BOSS>?", "options": OPTIONS, "allow_free_text": True}
    ask = call(use("system_ask_user", question))
    rules = {"rules": [{"tool": "gated", "decision": "ask"}], "default_decision": "ask"}
    calls = Calls()
    model = ScriptedModel.from_list([ask, say("noted")])
    return install_harness(agent("asker", [calls.tool("gated")], rules), model=model)


def park(h: Harness) -> tuple[str, str]:
    out = h.engine.send_message("asker", "help")
    assert out.status is TurnStatus.PAUSED and out.pending[0].kind == "question"
    return out.turn_id, out.pending[0].pending_id


def now(h: Harness) -> int:
    return int(h.clock.now())


def click(h: Harness, value: str, user: str = ALICE, **extra: Any) -> Reply:
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM, "domain": "questions"},
        "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "actions": [{"type": "button", "action_id": "x", "block_id": "b", "value": value}],
        **extra,
    }
    return http(api.handler, signed_event(payload, SECRET, now(h)))


def submit(
    h: Harness, view: dict[str, Any], answer: str | None, user: str = ALICE, team: str = TEAM
) -> Reply:
    """Slack's view_submission for ``view`` (as views.open got it) with ``answer`` typed in."""
    state = {
        "values": {blocks.ANSWER_BLOCK: {blocks.ANSWER_ACTION: {"type": "plain_text_input", "value": answer}}}
    }
    payload = {
        "type": "view_submission",
        "team": {"id": team, "domain": "questions"},
        "user": {"id": user, "username": user.lower(), "team_id": team},
        "api_app_id": "A0APP",
        "view": {**view, "id": "V0MODAL", "team_id": team, "state": state},
    }
    return http(api.handler, signed_event(payload, SECRET, now(h)))


def decided(h: Harness, turn_id: str) -> list[dict[str, Any]]:
    return [e for e in h.engine.audit(turn_id) if e["type"] == "decided"]


def answer_of(h: Harness, pending_id: str) -> tuple[str, str, str | None]:
    cp = h.rt.stores.checkpoints.find_by_pending(pending_id)
    assert cp is not None
    [record] = [d for d in cp.decisions if d.pending_id == pending_id]
    return getattr(record, "answer", ""), record.decided_by, record.channel


def open_modal(
    h: Harness, slack_api: SlackApi, pending: str, response_url: str | None = None
) -> dict[str, Any]:
    extra: dict[str, Any] = {"trigger_id": slack_api.trigger()}
    if response_url:
        extra["response_url"] = response_url
    assert click(h, f"text:{pending}", **extra) == (200, {})
    [opened] = slack_api.calls("views.open")
    view: dict[str, Any] = opened.body["view"]
    return view


# -- the message and the button values -------------------------------------------------------------


def test_a_question_has_a_button_per_option_and_type_an_answer() -> None:
    made = blocks.question_blocks("pnd_1", "Which <!here>?", OPTIONS, "https://x.example/answer")
    check_blocks(made, 50)  # what Slack documents it accepts
    [actions] = [b for b in made if b["type"] == "actions"]
    values = [parse_value(e["value"]) for e in actions["elements"]]
    assert values == [
        ButtonValue("answer", "pnd_1", 0),
        ButtonValue("answer", "pnd_1", 1),
        ButtonValue("text", "pnd_1"),
    ]
    labels = [e["text"]["text"] for e in actions["elements"]]
    assert labels == [*OPTIONS, blocks.TYPE_AN_ANSWER]  # plain_text: never rendered as a mention
    assert "<!here>" not in json.dumps([b for b in made if b["type"] != "actions"])


@pytest.mark.parametrize("options", [[f"o{i}" for i in range(MAX_OPTIONS + 1)], ["fine", "  "], None, []])
def test_options_that_cannot_be_buttons_are_listed_and_typing_stays(options: list[str] | None) -> None:
    made = blocks.question_blocks("pnd_1", "Which?", options, None)
    check_blocks(made, 50)
    [actions] = [b for b in made if b["type"] == "actions"]
    assert [parse_value(e["value"]).verb for e in actions["elements"]] == ["text"]


def test_a_long_option_is_clipped_on_its_button_but_answers_whole() -> None:
    made = blocks.question_blocks("pnd_1", "Which?", ["x" * 500], None)
    check_blocks(made, 50)
    [actions] = [b for b in made if b["type"] == "actions"]
    assert len(actions["elements"][0]["text"]["text"]) == 75
    assert parse_value(actions["elements"][0]["value"]) == ButtonValue("answer", "pnd_1", 0)


@pytest.mark.parametrize(
    "value,message",
    [
        ("answer:pnd_1", "option number"),
        ("answer:pnd_1:01", "option number"),
        ("answer:pnd_1:-1", "option number"),
        (f"answer:pnd_1:{MAX_OPTIONS}", "option number"),
        ("answer:pnd 1:0", "pendingId"),
        ("text:", "pendingId"),
        ("text:pnd_1:0", "pendingId"),
        ("type:pnd_1", "text:<pendingId>"),
    ],
)
def test_bad_button_values_say_what_is_wrong(value: str, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_value(value)
    assert message in str(info.value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_property_a_button_value_parses_to_what_made_it_or_is_invalid_input(text: str) -> None:
    try:
        parsed = parse_value(text)
    except InvalidInput:
        return
    assert button_value(parsed.verb, parsed.pending_id, parsed.option) == text


def test_the_modal_is_what_slack_documents_and_carries_the_item() -> None:
    view = blocks.answer_modal(
        "pnd_1", "Which <!channel>? " + "q" * 5000, "https://hooks.slack.com/actions/T/1/x"
    )
    check_modal(view)
    assert json.loads(view["private_metadata"]) == {
        "pendingId": "pnd_1",
        "responseUrl": "https://hooks.slack.com/actions/T/1/x",
    }
    assert "<!channel>" not in json.dumps(view)
    huge = blocks.answer_modal("pnd_1", "q", "https://h.example/" + "x" * 3000)
    check_modal(huge)  # a response_url that would not fit is left out
    assert json.loads(huge["private_metadata"]) == {"pendingId": "pnd_1"}


def test_the_stand_in_refuses_what_slack_would() -> None:
    view = blocks.answer_modal("pnd_1", "q", None)
    for broken in (
        {**view, "title": {"type": "plain_text", "text": "x" * 25}},
        {k: v for k, v in view.items() if k != "submit"},
        {**view, "private_metadata": "x" * 3001},
        {**view, "type": "home"},
    ):
        with pytest.raises(Exception, match=r"view|submit|private_metadata"):
            check_modal(broken)
    label = blocks.button("approve", "Approve", "pnd_1")
    label["text"]["text"] = "x" * 76
    with pytest.raises(Exception, match="button"):
        check_blocks([{"type": "actions", "elements": [label]}], 50)


# -- option buttons through the route ------------------------------------------------------------


def test_an_option_button_answers_with_the_items_text_as_the_slack_user(
    h: Harness, replies: ResponseUrls
) -> None:
    turn_id, pending = park(h)
    status, body = click(h, f"answer:{pending}:1", response_url=replies.url)
    assert status == 200 and body["replace_original"] is True
    assert body["text"] == f"Answered by <@{ALICE}>\n> replace &lt;!channel&gt;"
    assert [p.message for p in replies.posted] == [body]
    assert answer_of(h, pending) == (OPTIONS[1], f"slack:{ALICE}", "slack")
    [event] = decided(h, turn_id)
    assert (event["decidedBy"], event["channel"], event["decision"]) == (f"slack:{ALICE}", "slack", "answer")
    turn = h.engine.turn(turn_id)  # the harness resumes inline: the model got the answer
    assert turn.status is TurnStatus.FINISHED and turn.stop_reason is StopReason.END_TURN


def test_the_answer_is_never_read_from_the_payload(h: Harness) -> None:
    _, pending = park(h)
    forged = {"type": "button", "action_id": "x", "value": f"answer:{pending}:0", "text": {"text": "EVIL"}}
    status, _ = click(h, f"answer:{pending}:0", actions=[forged], answer="EVIL")
    assert status == 200 and answer_of(h, pending)[0] == "refund"


def test_an_option_the_question_does_not_have_decides_nothing(h: Harness) -> None:
    turn_id, pending = park(h)
    status, body = click(h, f"answer:{pending}:7")
    assert status == 200 and body["response_type"] == "ephemeral" and "not one of" in body["text"]
    assert decided(h, turn_id) == [] and h.engine.turn(turn_id).status is TurnStatus.PAUSED


def test_an_option_button_cannot_answer_an_approval(
    install_harness: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(route.SECRET_ENV, SECRET)
    monkeypatch.setenv(route.TEAM_ENV, TEAM)
    calls = Calls()
    h = install_harness(
        agent("asker", [calls.tool("gated")], {"default_decision": "ask"}),
        model=ScriptedModel.from_list([call(use("gated", {"x": 1})), say("done")]),
    )
    out = h.engine.send_message("asker", "go")
    pending = out.pending[0].pending_id
    for value in (f"answer:{pending}:0", f"text:{pending}"):
        status, body = click(h, value, trigger_id="1.2.3")
        assert status == 200 and body["response_type"] == "ephemeral" and "pending approval" in body["text"]
    assert decided(h, out.turn_id) == [] and calls.count("gated") == 0


def test_a_late_option_click_shows_who_answered(h: Harness, replies: ResponseUrls) -> None:
    turn_id, pending = park(h)
    event = with_body(load_event("answer_question", pendingId=pending), {"answer": "store credit"})
    assert http(api.handler, event)[0] in (200, 202)
    status, body = click(h, f"answer:{pending}:0", BOB, response_url=replies.url)
    assert (status, body) == (200, blocks.replace_message("Already resolved: answered by user:admin via api"))
    assert [p.message for p in replies.posted] == [body]
    assert len(decided(h, turn_id)) == 1 and answer_of(h, pending)[0] == "store credit"


# -- the modal -------------------------------------------------------------------------------------


def test_type_an_answer_opens_the_modal_with_views_open(
    h: Harness, slack_api: SlackApi, replies: ResponseUrls
) -> None:
    turn_id, pending = park(h)
    view = open_modal(h, slack_api, pending, replies.url)
    [opened] = slack_api.calls("views.open")
    assert opened.headers["authorization"] == f"Bearer {TOKEN}"
    assert opened.headers["content-type"].startswith("application/json")
    assert slack_api.refused == []  # the stand-in checked it as Slack documents views.open
    assert view["callback_id"] == blocks.MODAL_CALLBACK
    assert json.loads(view["private_metadata"]) == {"pendingId": pending, "responseUrl": replies.url}
    assert "Refund or replace &lt;@U0BOSS&gt;?" in json.dumps(view)  # from the pending item, escaped
    assert replies.posted == [] and decided(h, turn_id) == []  # opening changes nothing


def test_a_typed_answer_to_a_question_that_takes_only_its_options_is_refused_in_the_modal(
    h: Harness, slack_api: SlackApi, replies: ResponseUrls
) -> None:
    [config] = h.agents.configs.values()
    only = {"question": "Refund or replace?", "options": OPTIONS}
    h.engine.rt.model_for = lambda _c: ScriptedModel.from_list(
        [call(use("system_ask_user", only)), say("ok")]
    )
    turn_id = h.engine.send_message(config.name, "my order arrived broken").turn_id
    [item] = h.engine.outcome(turn_id).pending
    view = open_modal(h, slack_api, item.pending_id, replies.url)
    status, body = submit(h, view, "store credit")
    assert status == 200 and body["response_action"] == "errors", body  # shown under the field
    assert "takes one of its options" in body["errors"][blocks.ANSWER_BLOCK]
    assert decided(h, turn_id) == [] and replies.posted == []  # nothing recorded: still open


def test_the_submission_answers_as_the_slack_user(
    h: Harness, slack_api: SlackApi, replies: ResponseUrls
) -> None:
    turn_id, pending = park(h)
    view = open_modal(h, slack_api, pending, replies.url)
    status, body = submit(h, view, "  Replace it,\r\nplease  ")
    text = f"Answered by <@{ALICE}>\n> Replace it,\n> please"
    assert (status, body) == (200, blocks.notice_view(text))
    assert [p.message for p in replies.posted] == [blocks.replace_message(text)]  # the message too
    assert answer_of(h, pending) == ("Replace it,\nplease", f"slack:{ALICE}", "slack")
    [event] = decided(h, turn_id)
    assert (event["decidedBy"], event["channel"], event["decision"]) == (f"slack:{ALICE}", "slack", "answer")
    assert h.engine.turn(turn_id).stop_reason is StopReason.END_TURN


@pytest.mark.parametrize("typed", ["", "   \n ", None])
def test_an_empty_submission_keeps_the_modal_open(h: Harness, slack_api: SlackApi, typed: str | None) -> None:
    turn_id, pending = park(h)
    view = open_modal(h, slack_api, pending)
    status, body = submit(h, view, typed)
    assert (status, body) == (200, {"response_action": "errors", "errors": {"answer": "Type an answer"}})
    assert decided(h, turn_id) == []


def test_a_late_submission_shows_what_became_of_the_item(
    h: Harness, slack_api: SlackApi, replies: ResponseUrls
) -> None:
    turn_id, pending = park(h)
    view = open_modal(h, slack_api, pending, replies.url)
    status, _ = click(h, f"answer:{pending}:0", BOB)  # someone else answers while the modal is open
    assert status == 200
    replies.reset()
    status, body = submit(h, view, "too late")
    late = f"Already resolved: answered by <@{BOB}>"
    assert (status, body) == (200, blocks.notice_view(late))
    assert [p.message for p in replies.posted] == [blocks.replace_message(late)]
    assert len(decided(h, turn_id)) == 1 and answer_of(h, pending)[0] == "refund"


def test_a_submission_after_cancel_says_cancelled(h: Harness, slack_api: SlackApi) -> None:
    turn_id, pending = park(h)
    view = open_modal(h, slack_api, pending)
    status, _ = http(api.handler, load_event("cancel_turn", turnId=turn_id))
    assert status == 200
    assert submit(h, view, "hello?") == (200, blocks.notice_view("Cancelled"))
    assert decided(h, turn_id) == []


def test_without_a_bot_token_type_an_answer_says_where_else(
    h: Harness, slack_api: SlackApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(route.BOT_TOKEN_ENV)
    _, pending = park(h)
    status, body = click(h, f"text:{pending}", trigger_id=slack_api.trigger())
    assert status == 200 and body["response_type"] == "ephemeral"
    assert f"POST /pending-questions/{pending}/answer" in body["text"]
    assert slack_api.calls("views.open") == []


@pytest.mark.parametrize("problem", ["stale trigger", "wrong token", "unreachable"])
def test_when_the_modal_cannot_open_the_user_is_told_privately(
    h: Harness,
    slack_api: SlackApi,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    problem: str,
) -> None:
    _, pending = park(h)
    trigger = "9.9.unknown" if problem == "stale trigger" else slack_api.trigger()
    if problem == "wrong token":
        monkeypatch.setenv(route.BOT_TOKEN_ENV, "xoxb-not-the-t0ken")
    if problem == "unreachable":
        monkeypatch.setenv(route.API_BASE_ENV, "http://slack.example/api")  # not https: refused unsent
    status, body = click(h, f"text:{pending}", trigger_id=trigger)
    assert status == 200 and body["response_type"] == "ephemeral" and "could not be opened" in body["text"]
    logged = caplog.text + capsys.readouterr().out
    assert "could not open the Slack answer modal" in logged
    assert TOKEN not in logged and "xoxb-not-the-t0ken" not in logged


def test_views_open_errors_never_hold_the_token(slack_api: SlackApi) -> None:
    view = blocks.answer_modal("pnd_1", "q", None)
    with pytest.raises(DeliveryError, match="invalid_trigger_id") as info:
        views.open_view(slack_api.base, TOKEN, "0.0.never", view)
    assert TOKEN not in str(info.value)
    with pytest.raises(ConfigError):
        views.open_view("http://slack.example/api", TOKEN, "t", view)
    with pytest.raises(ConfigError):
        views.open_view(slack_api.base, "", "t", view)


# -- reading a submission --------------------------------------------------------------------------


def _submission(**view: Any) -> bytes:
    base = {
        "callback_id": blocks.MODAL_CALLBACK,
        "private_metadata": json.dumps({"pendingId": "pnd_1"}),
        "state": {"values": {"answer": {"answer": {"type": "plain_text_input", "value": "yes"}}}},
    }
    payload = {
        "type": "view_submission",
        "user": {"id": ALICE},
        "team": {"id": TEAM},
        "view": {**base, **view},
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def test_a_submission_is_read() -> None:
    assert parse_interaction(_submission()) == SlackSubmission("pnd_1", ALICE, None, TEAM, "yes")


@pytest.mark.parametrize(
    "view,message",
    [
        ({"callback_id": "someone_elses"}, "answer modal"),
        ({"private_metadata": "{not json"}, "pendingId"),
        ({"private_metadata": json.dumps({"pendingId": "pnd 1"})}, "pendingId"),
        ({"private_metadata": json.dumps(["pnd_1"])}, "pendingId"),
        ({"state": {"values": {}}}, "answer field"),
        ({"state": None}, "answer field"),
    ],
)
def test_a_submission_that_is_not_ours_is_invalid(view: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_interaction(_submission(**view))


# -- failing closed --------------------------------------------------------------------------------


def test_without_a_workspace_configured_every_request_is_403(
    h: Harness, slack_api: SlackApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    turn_id, pending = park(h)
    view = blocks.answer_modal(pending, "q", None)
    monkeypatch.delenv(route.TEAM_ENV)
    for status, body in (
        click(h, f"answer:{pending}:0"),
        click(h, f"text:{pending}", trigger_id=slack_api.trigger()),
        submit(h, view, "an answer"),
    ):
        assert (status, body["error"]) == (403, "forbidden"), body
        assert route.TEAM_ENV in body["message"]
    monkeypatch.delenv(route.SECRET_ENV)  # no secret either: still 403, the workspace is checked first
    assert click(h, f"answer:{pending}:0")[0] == 403
    assert decided(h, turn_id) == [] and slack_api.calls("views.open") == []


def test_a_submission_from_another_workspace_is_403(h: Harness) -> None:
    turn_id, pending = park(h)
    status, body = submit(h, blocks.answer_modal(pending, "q", None), "an answer", team="T0OTHER")
    assert (status, body["error"]) == (403, "forbidden")
    assert decided(h, turn_id) == []


def test_a_stale_request_is_401_before_any_configuration_is_read(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, pending = park(h)
    monkeypatch.delenv(route.TEAM_ENV)
    payload = {"type": "block_actions", "user": {"id": ALICE}, "actions": [{"value": f"answer:{pending}:0"}]}
    event = signed_event(payload, SECRET, now(h) - 301)
    assert http(api.handler, event)[0] == 401
    unsigned = with_auth(event, None)
    del unsigned["headers"]["x-slack-signature"]
    assert http(api.handler, unsigned)[0] == 401
