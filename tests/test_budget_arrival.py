"""The API budget is counted from the request's arrival (DESIGN.md, "Time budgets and a clean exit").

API Gateway stamps ``requestContext.timeEpoch`` (ms) when a request reaches it; a cold start, or a
queue for an environment under ``loopengine dev`` (which stamps its own arrival before queueing),
counts against ``LOOPENGINE_API_BUDGET_SECONDS``. GIVEN an event whose stamp is N seconds old,
THEN the request's budget is the configured one less N (never below 0), all measured on the
engine's clock (a FakeClock here): no wall-clock assert. A stamp that cannot be a live request's
(a sample event from last year, or one from the future) counts as arriving now.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopengine.app.ports import ModelRequest, ModelResponse
from loopengine.http import api, budget
from loopengine.local.dev_http import to_event
from loopengine.models.scripted import ScriptedModel, say
from tests.handler_support import FakeContext, lambda_context, load_event
from tests.harness import Build, agent

NOW = 1_800_000_000.0


def stamped(ago: float, now: float = NOW) -> dict[str, Any]:
    """The sample message event, arrived ``ago`` seconds before ``now``."""
    event = load_event("post_message")
    event["requestContext"]["timeEpoch"] = round((now - ago) * 1000)
    return event


@settings(max_examples=60, deadline=None)
@given(ago=st.floats(min_value=0, max_value=60, allow_nan=False), configured=st.sampled_from([25.0, 10.0]))
def test_the_budget_is_what_is_left_of_it_since_arrival(ago: float, configured: float) -> None:
    env = {"LOOPENGINE_API_BUDGET_SECONDS": str(configured)}
    got = budget.seconds(FakeContext(), stamped(ago), NOW, env)
    assert got == pytest.approx(max(0.0, configured - round(ago, 3)), abs=0.002)


def test_a_stamp_that_is_no_live_requests_counts_as_arriving_now() -> None:
    event: dict[str, Any]
    for event in (load_event("post_message"), stamped(-600), stamped(3600), {"requestContext": {}}, {}):
        assert budget.seconds(FakeContext(), event, NOW, {}) == budget.API_BUDGET_SECONDS
    # the invocation's own time still bounds it (Lambda's remaining time less the margin)
    assert budget.seconds(FakeContext(remaining_ms=10_000), stamped(3), NOW, {}) == 10 - budget.MARGIN_SECONDS


def test_a_cold_request_answers_within_29_seconds_of_its_arrival(install_harness: Build) -> None:
    # GIVEN a model call that would take 35 s, and a message that reached API Gateway 12 s before
    # this handler ran (a cold start)
    in_call, release = threading.Event(), threading.Event()

    def slow(request: ModelRequest) -> ModelResponse:
        in_call.set()
        release.wait(60)
        return say("done")

    h = install_harness(
        agent("slow", [], {"default_decision": "ask"}), model=ScriptedModel(slow), inline=False
    )
    event = stamped(12, h.clock.now())
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/agents/slow/messages"
    event["pathParameters"] = {"agent": "slow"}
    arrived = h.clock.now() - 12
    answers: list[dict[str, Any]] = []
    sender = threading.Thread(
        target=lambda: answers.append(api.handler(event, lambda_context(FakeContext())))
    )
    sender.start()
    try:
        assert in_call.wait(30)
        # WHEN the model has taken 13 s (25 s after the arrival)
        h.clock.advance(13)
        sender.join(30)
    finally:
        release.set()
        sender.join(30)
    # THEN the request gave the turn to the worker then: 202 running, 25 s after arrival (< 29)
    assert answers, "no answer 25 s after arrival"
    body = json.loads(answers[0]["body"])
    assert (answers[0]["statusCode"], body["status"]) == (202, "running"), body
    assert h.clock.now() - arrived <= 29
    handed = [e for e in h.engine.audit(body["turnId"]) if e["type"] == "handed_off"]
    assert len(handed) == 1


def test_loopengine_dev_stamps_the_arrival_it_is_given() -> None:
    event = to_event("POST", "/agents/a/messages", {"host": "127.0.0.1"}, b"{}", "127.0.0.1", arrived=NOW - 7)
    assert event["requestContext"]["timeEpoch"] == int((NOW - 7) * 1000)
    assert budget.seconds(FakeContext(), event, NOW, {}) == pytest.approx(18.0)


def test_a_long_poll_waits_no_longer_than_is_left_since_arrival() -> None:
    assert budget.wait_seconds(25, stamped(24), NOW) == pytest.approx(1.0)
    assert budget.wait_seconds(25, stamped(40), NOW) == 0.0
    assert budget.wait_seconds(5, stamped(3), NOW) == 5.0
    assert budget.wait_seconds(25, load_event("turn_events"), NOW) == 25.0  # a sample event: from now
