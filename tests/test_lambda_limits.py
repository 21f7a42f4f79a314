"""Fitting Lambda's limits, end to end against ``loopengine dev`` and a slow local Messages API.

* No answer past the budget: a model call longer than the request's time budget is abandoned at the
  budget (it has no side effect), the request answers ``202 running`` within budget + 1 s, and the
  resume worker calls the model again and finishes the turn.
* Cancel within a second: ``POST /turns/{id}/cancel`` during a long model call shows ``cancelled``
  within 1 s of the request, and the abandoned call's response is discarded (recorded as such).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.channels.webhook.verify import WebhookReceiver
from tests.agent_folders import write_agent
from tests.dev_support import DevProcess, request
from tests.test_dev_reliability import FakeAnthropic, _env, _serve, _until

pytestmark = pytest.mark.slow


class SlowAnthropic(FakeAnthropic):
    """The fake Messages API, taking ``delay`` seconds for each answer (the first ``slow`` calls)."""

    def __init__(self, delay: float) -> None:
        super().__init__(failures=0)
        self.delay = delay
        original = self.reply

        def reply() -> dict[str, Any]:
            time.sleep(self.delay)
            return original()

        self.reply = reply  # type: ignore[method-assign]


@pytest.fixture
def slow_model(tmp_path: Path) -> Iterator[Callable[..., tuple[SlowAnthropic, dict[str, str]]]]:
    fakes: list[SlowAnthropic] = []

    def make(delay: float, **extra: str) -> tuple[SlowAnthropic, dict[str, str]]:
        fake = SlowAnthropic(delay)
        fakes.append(fake)
        write_agent(tmp_path / "agents", "talker")
        env = _env(tmp_path, ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=fake.url, **extra)
        env.pop("LOOPENGINE_MODEL")
        return fake, env

    yield make
    for fake in fakes:
        fake.close()


def _turn(port: int, turn_id: str) -> dict[str, Any]:
    status, body = request(port, "GET", f"/turns/{turn_id}")
    assert status == 200, body
    return body


def test_a_model_call_longer_than_the_budget_answers_202_within_the_budget(
    tmp_path: Path, servers: list[DevProcess], slow_model: Callable[..., tuple[SlowAnthropic, dict[str, str]]]
) -> None:
    budget = 2.0
    fake, env = slow_model(0.0, LOOPENGINE_API_BUDGET_SECONDS=str(budget))
    # one environment, warmed by a first message: what is measured is the handler, as on a warm Lambda
    srv = _serve(servers, env, tmp_path / "dev.log", "--sweep-interval", "1", "--workers", "1")
    assert request(srv.port, "POST", "/agents/talker/messages", {"message": "warm up"})[0] in (200, 202)
    fake.delay = 6.0  # the next model call takes three times the budget
    started = time.monotonic()
    status, body = request(srv.port, "POST", "/agents/talker/messages", {"message": "hello"})
    took = time.monotonic() - started
    fake.delay = 0.0  # the worker's call answers at once
    assert status == 202 and body["status"] == "running", body
    assert took <= budget + 1.0, f"answered after {took:.1f} s with a {budget} s budget"
    # the resume worker calls the model again (it answers at once the second time) and finishes
    done = _until("the worker to finish the turn", lambda: _finished(srv.port, body["turnId"]))
    assert done["stopReason"] == "end_turn"
    kinds = [e["type"] for e in done["audit"]]
    assert kinds.count("model_call_abandoned") == 1 and "handed_off" in kinds
    assert kinds.count("model_response") == 1  # the worker's call; the abandoned one is discarded


def _finished(port: int, turn_id: str) -> dict[str, Any] | None:
    body = _turn(port, turn_id)
    return body if body["status"] == "finished" else None


def test_cancel_during_a_long_model_call_shows_cancelled_within_a_second(
    tmp_path: Path, servers: list[DevProcess], slow_model: Callable[..., tuple[SlowAnthropic, dict[str, str]]]
) -> None:
    with WebhookReceiver("hook-secret") as hooks:  # run_start tells us the turn id while it runs
        hook = {
            "LOOPENGINE_DEFAULT_WEBHOOK_URL": hooks.url,
            "LOOPENGINE_DEFAULT_WEBHOOK_SECRET": "hook-secret",
        }
        fake, env = slow_model(8.0, **hook)
        srv = _serve(servers, env, tmp_path / "dev.log", "--sweep-interval", "0")
        answers: list[tuple[int, dict[str, Any]]] = []

        def send() -> None:
            try:
                answers.append(request(srv.port, "POST", "/agents/talker/messages", {"message": "hello"}))
            except OSError as exc:  # reported by the assertion below, never lost in the thread
                answers.append((0, {"error": repr(exc)}))

        sender = threading.Thread(target=send)
        sender.start()
        turn_id = hooks.wait_for("run_start", timeout=20).payload["turnId"]
        _until("the model call to be in flight", lambda: fake.seen >= 1 or None)
        time.sleep(0.5)  # well inside the 8 s call
        cancelled_at = time.monotonic()
        status, body = request(srv.port, "POST", f"/turns/{turn_id}/cancel")
        assert status in (200, 202), body
        done = _until("the turn to show cancelled", lambda: _finished(srv.port, turn_id))
        seen = time.monotonic() - cancelled_at
        assert done["stopReason"] == "cancelled"
        assert seen <= 1.0, f"cancelled visible after {seen:.2f} s"
        sender.join(timeout=30)
    assert answers and answers[0][1]["stopReason"] == "cancelled", answers
    abandoned = [e for e in done["audit"] if e["type"] == "model_call_abandoned"]
    assert [e["reason"] for e in abandoned] == ["cancelled"]
    assert not [e for e in done["audit"] if e["type"] == "model_response"]  # discarded, never recorded
