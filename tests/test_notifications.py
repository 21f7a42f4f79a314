"""Notification events: one model each, built in one place, each sent document valid under its schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from loopengine.app.request.resolution import Decider
from loopengine.authoring.tools import ASK_USER
from loopengine.domain import notifications
from loopengine.domain.decisions import Approval, Reply
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.harness import Calls, agent
from tests.scenario import scenario
from tests.test_edit_and_questions import REFUND, REFUND_SCHEMA, RULES

SCHEMA_DOC = Path(__file__).resolve().parent.parent / "docs" / "notifications.schema.json"
REVIEWER = Decider("reviewer@example.com", "api")


def test_the_published_schema_is_current() -> None:
    assert json.loads(SCHEMA_DOC.read_text()) == notifications.json_schema(), (
        "regenerate: python -m loopengine.domain.notifications > docs/notifications.schema.json"
    )


def test_every_document_a_turn_sends_is_valid_and_parses_back() -> None:
    calls = Calls()
    shop = agent("shop", [calls.tool("issue_refund", REFUND_SCHEMA)], RULES)
    model = ScriptedModel.from_list(
        [
            call(use(ASK_USER, {"question": "Which order?", "options": ["A-1", "A-2"]}, id="q1")),
            call(use("issue_refund", REFUND, id="r1")),
            say("done"),
        ]
    )
    with scenario(shop, model=model) as h:
        out = h.engine.send_message("shop", "refund please")
        h.engine.answer(out.pending[0].pending_id, Reply("A-1"), REVIEWER)
        [pending] = h.engine.outcome(out.turn_id).pending
        h.engine.resolve(pending.pending_id, Approval(), REVIEWER)
        sent = list(h.notifier.sent)
    assert [n.event for n in sent] == [
        "run_start",
        "question",
        "run_start",
        "approval",
        "run_start",
        "run_finish",
    ]
    schema = notifications.json_schema()
    for note in sent:
        document = {"event": note.event, **note.payload}
        jsonschema.validate(document, schema)
        parsed = notifications.parse(document)
        assert parsed.event == note.event and parsed.payload() == {
            k: v for k, v in note.payload.items() if k != "eventId"
        }
    finish = sent[-1].payload
    assert (finish["stopReason"], finish["text"], finish["trigger"]) == ("end_turn", "done", "message")


@pytest.mark.parametrize(
    "document",
    [
        {"event": "approval", "turnId": "t", "sessionId": "s", "agent": "a"},  # no pendingId, tool, ...
        {
            "event": "run_finish",
            "turnId": "t",
            "sessionId": "s",
            "agent": "a",
            "stopReason": "x",
            "text": None,
            "trigger": "message",
            "pendingId": "p",
        },  # a field of another event
        {"event": "refund_issued", "turnId": "t", "sessionId": "s", "agent": "a"},
    ],
)
def test_a_document_that_is_not_one_of_the_four_is_refused(document: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        notifications.parse(document)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "eventId": "evt_" + "0" * 32}, notifications.json_schema())
