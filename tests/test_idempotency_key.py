"""``Idempotency-Key`` on POST /agents/{agent}/messages and POST /turns/{turnId}/cancel (DESIGN.md).

A client whose answer was lost sends the same request again: it must get the first request's turn as it
stands now, with no second turn, no second user message and no tool run again; the same key with another
body is 422 ``idempotency_mismatch``. Run on SQLite and on DynamoDB (moto), through the api handler.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.domain.decisions import Approval
from loopengine.http import api
from tests.edge_support import STORES, Edge, installed, message_event
from tests.handler_support import call as http
from tests.handler_support import load_event

KEY = "order-A-1001-refund-7f3c"


@pytest.fixture(params=STORES)
def edge(request: pytest.FixtureRequest, tmp_path: Path, handler_env: dict[str, str]) -> Iterator[Edge]:
    with installed(request.param, tmp_path) as made:
        yield made


def send(body: dict[str, Any], key: str | None = KEY, **headers: str) -> tuple[int, dict[str, Any]]:
    event = message_event(body)
    event["headers"] = {**event["headers"], **headers}
    if key is not None:
        event["headers"]["idempotency-key"] = key
    return http(api.handler, event)


def user_messages(edge: Edge, session_id: str) -> int:
    return sum(1 for m in edge.engine.history(session_id) if m.role == "user" and m.text)


def test_a_retry_answers_the_first_turn_and_writes_nothing(edge: Edge) -> None:
    first = send({"message": "refund A-1001"})
    assert first[0] == 202 and first[1]["status"] == "paused", first
    before = edge.dump()

    again = send({"message": "refund A-1001"})

    assert again == first  # same turnId, same sessionId, the same pending item
    assert edge.dump() == before  # no second turn, no second message, no record touched
    assert user_messages(edge, first[1]["sessionId"]) == 1


def test_a_retry_after_the_turn_moved_on_answers_its_current_state(edge: Edge) -> None:
    status, paused = send({"message": "refund A-1001"})
    edge.engine.resolve(paused["pendingItems"][0]["pendingId"], Approval(), _operator())
    assert edge.calls.count("issue_refund") == 1

    status, again = send({"message": "refund A-1001"})

    assert status == 200 and again["status"] == "finished" and again["turnId"] == paused["turnId"]
    assert edge.calls.count("issue_refund") == 1  # the approved call did not run again


def test_the_same_key_with_another_body_is_422_and_changes_nothing(edge: Edge) -> None:
    send({"message": "refund A-1001"})
    before = edge.dump()
    for other in ({"message": "refund A-1002"}, {"message": "refund A-1001", "sessionId": "ses-other"}):
        status, body = send(other)
        assert (status, body["error"]) == (422, "idempotency_mismatch"), body
    assert edge.dump() == before


def test_a_retry_does_not_supersede_its_own_paused_turn(edge: Edge) -> None:
    """The failure of issue 13: the re-sent message superseded its own pause (its item became unknown)."""
    _, first = send({"message": "refund A-1001", "sessionId": "ses-retry"})
    _, again = send({"message": "refund A-1001", "sessionId": "ses-retry"})
    assert again["turnId"] == first["turnId"] and again["status"] == "paused"
    assert edge.engine.turn(first["turnId"]).stop_reason is not None  # still parked: pending_approval
    assert edge.engine.turn(first["turnId"]).stop_reason.value == "pending_approval"  # type: ignore[union-attr]
    assert edge.open_ids() == {first["pendingItems"][0]["pendingId"]}


def test_without_a_key_a_resend_is_a_new_message(edge: Edge) -> None:
    _, first = send({"message": "refund A-1001"}, key=None)
    _, second = send({"message": "refund A-1001"}, key=None)
    assert first["turnId"] != second["turnId"]


def test_keys_are_scoped_by_agent_and_tenant(edge: Edge, monkeypatch: pytest.MonkeyPatch) -> None:
    status, first = send({"message": "refund A-1001"})
    monkeypatch.setenv(
        "LOOPENGINE_USERS",
        '[{"user": "bob", "password": "pw", "tenants": ["acme"]}]',
    )
    event = message_event({"message": "refund A-1001"})
    event["headers"] = {**event["headers"], "idempotency-key": KEY}
    import base64

    event["headers"]["authorization"] = "Basic " + base64.b64encode(b"bob:pw").decode()
    status, other = http(api.handler, event)
    assert status == 202 and other["turnId"] != first["turnId"]  # another tenant: another request


@pytest.mark.parametrize("bad", ["", "x" * 256, "tab\there", "ünïcode"])
def test_a_malformed_key_is_400_before_anything_is_written(edge: Edge, bad: str) -> None:
    before = edge.dump()
    status, body = send({"message": "refund A-1001"}, key=bad)
    assert status == 400 and body["error"] == "invalid_input", body
    assert edge.dump() == before


def test_racing_requests_with_one_key_make_one_turn(edge: Edge) -> None:
    answers: list[tuple[int, dict[str, Any]]] = []
    go = threading.Barrier(4)

    def one() -> None:
        go.wait()
        answers.append(send({"message": "refund A-1001"}))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    turn_ids = {body.get("turnId") for _status, body in answers}
    assert len(turn_ids) == 1, answers
    assert len(edge.open_ids()) == 1


def test_cancel_takes_a_key_and_refuses_it_for_another_turn(edge: Edge) -> None:
    status, a = send({"message": "refund A-1001"}, key="msg-a")
    status, b = send({"message": "refund A-1002"}, key="msg-b")

    def cancel(turn_id: str, key: str) -> tuple[int, dict[str, Any]]:
        event = load_event("cancel_turn", turnId=turn_id)
        event["headers"] = {**event["headers"], "idempotency-key": key}
        return http(api.handler, event)

    first = cancel(a["turnId"], "cancel-1")
    assert first[0] == 200 and first[1]["stopReason"] == "cancelled", first
    assert cancel(a["turnId"], "cancel-1") == first
    status, body = cancel(b["turnId"], "cancel-1")
    assert (status, body["error"]) == (422, "idempotency_mismatch")
    assert edge.engine.turn(b["turnId"]).stop_reason.value == "pending_approval"  # type: ignore[union-attr]


def _operator() -> Any:
    from loopengine.domain.principals import OPERATOR, Principal

    return Principal("admin", "api", kind=OPERATOR)
