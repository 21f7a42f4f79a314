"""A question with options takes one of them, unless it allows free text (issue 28: on every channel).

Answers of every channel are recorded in one place (``resolution.answer_question``), which asks the
domain (``checkpoint.check_answer``). GIVEN a model that asks ``system_ask_user`` with options,
WHEN an answer that is not among them arrives through ``POST /pending-questions/{id}/answer``, THEN
it is 400 naming the options and the question stays open (the same pendingId takes an option next);
a question with ``allow_free_text: true`` takes any answer. The redis channel's consumer meets the
same refusal (tests/test_redis_consumer.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from loopengine import Principal
from loopengine.authoring.tools import ASK_USER, ASK_USER_SPEC
from loopengine.channels.inbox import csrf
from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.decisions import Reply
from loopengine.http import api
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.handler_support import call as http
from tests.handler_support import load_event, with_body
from tests.harness import Build, Harness, agent

OPTIONS = ["refund", "replacement"]


def asking(build: Build, **extra: Any) -> tuple[Harness, str]:
    question = {"question": "Refund or replacement?", "options": OPTIONS, **extra}
    model = ScriptedModel.from_list([call(use(ASK_USER, question)), say("Thanks.")])
    h = build(agent("desk", [], {"default_decision": "ask"}), model=model)
    out = h.engine.send_message("desk", "my order arrived broken")
    [item] = out.pending
    assert item.kind == "question"
    return h, item.pending_id


def answer(pending_id: str, text: str) -> tuple[int, dict[str, Any]]:
    return http(api.handler, with_body(load_event("answer_question", pendingId=pending_id), {"answer": text}))


def test_an_answer_outside_the_options_is_400_naming_them_and_the_question_stays_open(
    install_harness: Build,
) -> None:
    h, pending_id = asking(install_harness)
    for wrong in ("Refund to the original card.", "REFUND", "refund or replacement"):
        status, body = answer(pending_id, wrong)
        assert (status, body["error"]) == (400, "invalid_input"), body
        assert '"refund", "replacement"' in body["message"], body
    assert [i["pendingId"] for i in h.engine.open_items()] == [pending_id]  # nothing recorded

    status, body = answer(pending_id, " replacement ")  # surrounding whitespace aside: an option
    assert (status, body["outstanding"]) == (202, 0), body
    stop_reason = h.engine.turn(body["turnId"]).stop_reason
    assert stop_reason is not None and stop_reason.value == "end_turn"
    assert answer(pending_id, "refund") == (200, {"alreadyResolved": True})


def test_a_question_that_allows_free_text_takes_any_answer(install_harness: Build) -> None:
    h, pending_id = asking(install_harness, allow_free_text=True)
    status, body = answer(pending_id, "Refund to the original card, please.")
    assert (status, body["outstanding"]) == (202, 0), body
    stop_reason = h.engine.turn(body["turnId"]).stop_reason
    assert stop_reason is not None and stop_reason.value == "end_turn"


def test_a_question_without_options_takes_any_answer_and_the_library_refuses_alike(
    install_harness: Build,
) -> None:
    model = ScriptedModel.from_list([call(use(ASK_USER, {"question": "Which order?"})), say("Thanks.")])
    h = install_harness(agent("desk", [], {"default_decision": "ask"}), model=model)
    [free] = h.engine.send_message("desk", "where is my order").pending
    assert answer(free.pending_id, "A-1001")[0] == 202

    h2, pending_id = asking(install_harness)
    with pytest.raises(InvalidInput, match="refund"):
        h2.engine.answer(pending_id, Reply("something else"), Principal("ops@example.com"))


def test_the_ask_tool_lets_the_model_allow_free_text() -> None:
    schema = ASK_USER_SPEC["input_schema"]["properties"]["allow_free_text"]
    assert schema["type"] == "boolean" and "default false" in schema["description"]


@pytest.mark.parametrize("free", [False, True])
def test_the_inbox_offers_a_typed_answer_only_where_one_is_taken(
    install_harness: Build, monkeypatch: pytest.MonkeyPatch, free: bool
) -> None:
    monkeypatch.setenv(csrf.SECRET_ENV, "inbox-secret-0123456789")
    _, pending_id = asking(install_harness, **({"allow_free_text": True} if free else {}))
    event = load_event("inbox")
    event["rawQueryString"], event["queryStringParameters"] = "", None  # every agent's items
    status, page = http(api.handler, event)
    assert status == 200 and pending_id in page["html"]
    assert page["html"].count('name="choice"') == len(OPTIONS)  # the options: always buttons
    assert ('name="answer"' in page["html"]) is free
