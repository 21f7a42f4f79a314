"""The api and resume handlers on DynamoDB (moto), built through the real composition root.

``LOOPENGINE_TABLE`` is set, so :func:`loopengine.http.root.build` picks the DynamoDB stores exactly as a
deployment does; only the invoker is replaced by a :class:`RecordingInvoker`, so each test delivers
the resume Lambda's events itself (events/resume.json), as many times as it likes.

Races are made deterministic rather than hoped for: the racers are held at a rendezvous just
before their first conditional write, so both have read the same version and one of them must
lose the compare-and-set on the table and retry.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from loopengine.app.engine import Engine
from loopengine.app.invokers import RecordingInvoker
from loopengine.domain.base.errors import VersionConflict
from loopengine.domain.messages import Message, check_protocol
from loopengine.http import api, root
from loopengine.http.functions import resume
from loopengine.stores.dynamodb import DynamoCheckpointStore
from tests.contract.conftest import moto_dynamodb, one_request_at_a_time
from tests.handler_support import FakeContext, call, lambda_context, load_event, with_auth, with_body

TABLE = "loopengine-api-test"
PLACEHOLDER_SESSION = "ses_00000000000000000000000000000000"
BROKEN = "Order A-1001 arrived broken, please refund it."
RIGHT_AWAY = "Order A-1001 arrived broken, please refund it right away."
ENV = {
    "LOOPENGINE_TABLE": TABLE,
    "LOOPENGINE_ADMIN_AUTH": "admin:secret",
    "LOOPENGINE_MODEL": "scripted",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_NAMESPACE": "loopengine-test",
}
UNSET = (
    "LOOPENGINE_DB",
    "LOOPENGINE_DEFAULT_WEBHOOK_URL",
    "LOOPENGINE_RESUME_FUNCTION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_PROFILE",
)
R = TypeVar("R")


@dataclass
class Deployment:
    """The engine the handlers use, its recording invoker, and the raw moto client."""

    engine: Engine
    invoker: RecordingInvoker
    client: Any

    def turn_items(self) -> list[dict[str, Any]]:
        """Every turn record in the table (raw items)."""
        pages = self.client.get_paginator("scan").paginate(TableName=TABLE)
        return [i for page in pages for i in page["Items"] if i["sk"]["S"] == "TURN"]


@pytest.fixture
def dep(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    """GIVEN the handlers' engine built by loopengine.http.root from an environment naming a moto table."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    with moto_dynamodb(TABLE) as client:
        built = root.build(dict(ENV))
        assert isinstance(built.rt.stores.checkpoints, DynamoCheckpointStore)
        one_request_at_a_time(built.rt.stores.checkpoints.table.client)  # the client root.build made
        invoker = RecordingInvoker()
        built.rt.invoker = invoker  # the test delivers the resume events itself
        root.install(built)
        try:
            yield Deployment(built, invoker, client)
        finally:
            root.install(None)
            built.rt.stores.close()


# -- requests -------------------------------------------------------------------------------------


def post(message: str = BROKEN, session_id: str | None = PLACEHOLDER_SESSION) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = {"message": message}
    if session_id is not None:
        body["sessionId"] = session_id
    return call(api.handler, with_body(load_event("post_message"), body))


def paused(message: str = BROKEN, session_id: str | None = PLACEHOLDER_SESSION) -> dict[str, Any]:
    status, body = post(message, session_id)
    assert status == 202 and body["status"] == "paused", body
    return body


def approve(pending_id: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    event = load_event("resolve_approve", pendingId=pending_id)
    return call(api.handler, event if body is None else with_body(event, body))


def deny(pending_id: str) -> tuple[int, dict[str, Any]]:
    return call(api.handler, load_event("resolve_deny", pendingId=pending_id))


def deliver_resume(turn_id: str) -> dict[str, Any]:
    """One delivery of the resume Lambda's async event."""
    answer: dict[str, Any] = resume.handler(
        load_event("resume", turnId=turn_id), lambda_context(FakeContext())
    )
    return answer


def get_turn(turn_id: str) -> dict[str, Any]:
    status, body = call(api.handler, load_event("get_turn", turnId=turn_id))
    assert status == 200, body
    return body


def get_history(session_id: str) -> list[Message]:
    """GET /sessions/{id}, parsed and checked against the Messages API tool protocol."""
    event = load_event("get_session", **{PLACEHOLDER_SESSION: session_id})
    status, body = call(api.handler, event)
    assert status == 200 and body["sessionId"] == session_id, body
    history = [Message.from_dict(m) for m in body["messages"]]
    check_protocol(history)
    return history


def results(message: Message) -> dict[str, dict[str, Any]]:
    """The JSON tool_result contents of a message, by tool_use_id."""
    return {r.tool_use_id: json.loads(r.content) for r in message.tool_results}


def audit(turn: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in turn["audit"] if e["type"] == kind]


ALREADY = (200, {"alreadyResolved": True})


# -- races ----------------------------------------------------------------------------------------


def hold_first_write(
    store: Any, name: str, rendezvous: threading.Barrier, before: Callable[[], None] = lambda: None
) -> list[VersionConflict]:
    """Make each thread's first ``store.name(...)`` (a compare-and-set) wait at ``rendezvous``.

    ``before`` runs just before the wait. Returns the list the conflicts the table reported are
    collected in, so a test can show the race really was decided by a conditional write.
    """
    original = getattr(store, name)
    local = threading.local()
    conflicts: list[VersionConflict] = []

    def held(*args: Any, **kwargs: Any) -> Any:
        if not getattr(local, "held", False):
            local.held = True
            before()
            rendezvous.wait(timeout=10)
        try:
            return original(*args, **kwargs)
        except VersionConflict as lost:
            conflicts.append(lost)
            raise

    setattr(store, name, held)
    return conflicts


def race(fns: list[Callable[[], R]]) -> list[R]:
    """Run each function on its own thread; re-raise the first failure; results in order."""
    out: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            out[i] = fns[i]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a racer hung"
    if errors:
        raise errors[0]
    return out


# -- seed 003 -------------------------------------------------------------------------------------


def test_seed_003_walkthrough_on_dynamodb(dep: Deployment) -> None:
    # GIVEN a message: lookup_order runs on its own, the refund waits for a human
    first = paused()
    turn_id, session_id = first["turnId"], first["sessionId"]
    assert first["stopReason"] == "pending_approval"
    [refund] = first["pendingItems"]
    assert refund["tool"] == "issue_refund" and refund["kind"] == "approval"
    assert refund["args"] == {"order_id": "A-1001", "amount": 212.0, "reason": "arrived broken"}
    assert dep.turn_items(), "the turn is a DynamoDB item"

    # WHEN the refund is approved (the last outstanding item): the resume is queued
    status, body = approve(refund["pendingId"])
    assert (status, body) == (
        202,
        {"resolved": True, "outstanding": 0, "status": "resuming", "turnId": turn_id},
    )
    assert dep.invoker.invoked == [turn_id]

    # AND the resume event arrives: the turn pauses again on the confirmation email (chained)
    assert deliver_resume(turn_id) == {
        "resumed": True,
        "turnId": turn_id,
        "status": "paused",
        "stopReason": "pending_approval",
    }
    turn = get_turn(turn_id)
    assert turn["status"] == "paused"
    [email] = turn["pendingItems"]
    assert email["tool"] == "send_email" and email["args"]["intent"] == "refund"

    # WHEN the email is approved and its resume delivered
    status, body = approve(email["pendingId"])
    assert (status, body) == (
        202,
        {"resolved": True, "outstanding": 0, "status": "resuming", "turnId": turn_id},
    )
    assert dep.invoker.invoked == [turn_id, turn_id]
    done = deliver_resume(turn_id)
    assert (done["resumed"], done["status"], done["stopReason"]) == (True, "finished", "end_turn")

    # THEN the turn finished with the final text
    turn = get_turn(turn_id)
    assert (turn["status"], turn["stopReason"]) == ("finished", "end_turn")
    assert turn["text"].startswith("Done: order A-1001 was refunded") and "212.00 USD" in turn["text"]
    assert turn["pendingItems"] == []
    assert [d["pendingId"] for d in audit(turn, "decided")] == [refund["pendingId"], email["pendingId"]]
    assert all(d["decidedBy"] == "user:admin" for d in audit(turn, "decided"))

    # AND the history is protocol-valid: every tool ran once and was answered once
    history = get_history(session_id)
    assert [m.role for m in history] == ["user", *["assistant", "user"] * 3, "assistant"]
    assert [u.name for m in history for u in m.tool_uses] == ["lookup_order", "issue_refund", "send_email"]
    assert all(r["status"] == "issued" for r in results(history[4]).values())
    assert history[-1].text == turn["text"] and not history[-1].tool_uses
    calls = dep.engine.rt.stores.turns.calls(turn_id)
    assert sorted(c.tool for c in calls.values()) == ["issue_refund", "lookup_order", "send_email"]

    # AND late clicks are harmless no-ops
    assert approve(refund["pendingId"]) == ALREADY
    assert deny(email["pendingId"]) == ALREADY
    assert dep.invoker.invoked == [turn_id, turn_id]
    assert len(dep.engine.rt.stores.turns.calls(turn_id)) == 3


def test_cascade_skip_on_dynamodb(dep: Deployment) -> None:
    # GIVEN "right away": the refund and the email wait in ONE batch
    first = paused(RIGHT_AWAY, session_id=None)
    turn_id = first["turnId"]
    refund, email = first["pendingItems"]
    assert (refund["tool"], email["tool"]) == ("issue_refund", "send_email")

    # WHEN the refund is denied
    status, body = deny(refund["pendingId"])

    # THEN the turn finished as denied at once (no model call, no resume to deliver)
    assert (status, body) == (
        200,
        {"resolved": True, "outstanding": 0, "status": "finished", "stopReason": "denied", "turnId": turn_id},
    )
    assert dep.invoker.invoked == []
    turn = get_turn(turn_id)
    assert (turn["status"], turn["stopReason"], turn["pendingItems"]) == ("finished", "denied", [])
    # AND the pushed tool_result message answers both: denied, and the sibling skipped
    history = get_history(first["sessionId"])
    batch, pushed = history[-2], history[-1]
    assert [u.name for u in batch.tool_uses] == ["issue_refund", "send_email"]
    assert pushed.role == "user"
    assert [r.tool_use_id for r in pushed.tool_results] == [u.id for u in batch.tool_uses]
    outcome = results(pushed)
    refund_use, email_use = batch.tool_uses
    assert outcome[refund_use.id]["status"] == "denied"
    assert outcome[refund_use.id]["comment"] == "Refunds over 100 need a manager."
    assert outcome[email_use.id]["status"] == "skipped"
    assert "send_email" not in {c.tool for c in dep.engine.rt.stores.turns.calls(turn_id).values()}

    # AND a late click on the skipped email is a no-op
    assert approve(email["pendingId"]) == ALREADY
    assert dep.invoker.invoked == []
    assert get_turn(turn_id)["stopReason"] == "denied"


# -- at-least-once delivery and racing clicks -----------------------------------------------------


@pytest.mark.parametrize("delivery", ["one_after_the_other", "at_the_same_moment"])
def test_duplicate_resume_delivery_resumes_once(dep: Deployment, delivery: str) -> None:
    # GIVEN a turn whose only item was approved: one resume is queued
    first = paused()
    turn_id = first["turnId"]
    assert approve(first["pendingItems"][0]["pendingId"])[0] == 202

    # WHEN the resume event is delivered twice
    if delivery == "at_the_same_moment":
        # both deliveries have read the paused turn before either claims it
        turns = dep.engine.rt.stores.turns
        conflicts = hold_first_write(turns, "commit", threading.Barrier(2))
        answers = race([lambda: deliver_resume(turn_id), lambda: deliver_resume(turn_id)])
        del turns.commit
        assert len(conflicts) == 1, "the loser's claim failed on the table"
    else:
        answers = [deliver_resume(turn_id), deliver_resume(turn_id)]

    # THEN exactly one resumed (and paused again on the email); the other did nothing
    assert sorted(a["resumed"] for a in answers) == [False, True]
    [won] = [a for a in answers if a["resumed"]]
    assert (won["status"], won["stopReason"]) == ("paused", "pending_approval")
    assert [a for a in answers if not a["resumed"]] == [{"resumed": False, "turnId": turn_id}]
    turn = get_turn(turn_id)
    assert len(audit(turn, "resumed")) == 1
    assert [p["tool"] for p in turn["pendingItems"]] == ["send_email"]
    get_history(first["sessionId"])  # one model answer appended, still protocol-valid


def test_two_siblings_approved_at_once_both_recorded_resumed_once(dep: Deployment) -> None:
    # GIVEN one batch with two pending items
    first = paused(RIGHT_AWAY, session_id=None)
    turn_id = first["turnId"]
    refund, email = first["pendingItems"]
    # Both clicks read the checkpoint at the same version before either writes, so one of the two
    # conditional writes must fail on the table and be retried. The handlers' own prologue runs one
    # at a time (a Lambda environment serves one event at a time; Powertools' resolver keeps the
    # current event in process-wide state), released as each request reaches the store.
    prologue = threading.Lock()
    store = dep.engine.rt.stores.turns
    conflicts = hold_first_write(store, "commit", threading.Barrier(2), before=prologue.release)

    def click(pending_id: str) -> Callable[[], tuple[int, dict[str, Any]]]:
        def go() -> tuple[int, dict[str, Any]]:
            assert prologue.acquire(timeout=10), "the other click never reached the store"
            return approve(pending_id)

        return go

    # WHEN both are approved at the same moment through the api handler
    answers = race([click(refund["pendingId"]), click(email["pendingId"])])
    del store.commit  # the rest of the test writes without the rendezvous

    # THEN both decisions were recorded and exactly one of them handed the turn on
    assert all(body.get("resolved") is True for _, body in answers), answers
    assert conflicts, "one click lost a conditional write on the table and retried"
    assert (202, {"resolved": True, "outstanding": 0, "status": "resuming", "turnId": turn_id}) in answers
    other = (200, {"resolved": True, "outstanding": 1})  # or 202 too, if both claimed before either ran
    assert all(a == other or a[0] == 202 for a in answers), answers
    assert dep.invoker.invoked == [turn_id]
    cp = dep.engine.rt.stores.checkpoints.find_by_pending(refund["pendingId"])
    assert cp is not None and cp.complete and not cp.denied
    assert sorted(d.pending_id for d in cp.decisions) == sorted([refund["pendingId"], email["pendingId"]])
    assert {d.kind for d in cp.decisions} == {"approve"}
    assert len(cp.approved) == 2  # recorded; the worker runs them
    decided = audit(get_turn(turn_id), "decided")
    assert sorted(d["pendingId"] for d in decided) == sorted([refund["pendingId"], email["pendingId"]])
    calls = dep.engine.rt.stores.turns.calls(turn_id)
    assert not any(c.tool in ("issue_refund", "send_email") for c in calls.values())

    # AND the one resume finishes the turn with both results in one message, in tool_use order
    done = deliver_resume(turn_id)
    assert (done["status"], done["stopReason"]) == ("finished", "end_turn")
    assert deliver_resume(turn_id) == {"resumed": False, "turnId": turn_id}
    history = get_history(first["sessionId"])
    batch, pushed = history[-3], history[-2]
    assert [r.tool_use_id for r in pushed.tool_results] == [u.id for u in batch.tool_uses]
    assert history[-1].text.startswith("Done: order A-1001 was refunded")
    assert approve(email["pendingId"]) == ALREADY


# -- errors ---------------------------------------------------------------------------------------


def _rename(event: dict[str, Any], path: str) -> dict[str, Any]:
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    return event


ERRORS: dict[str, tuple[Callable[[], dict[str, Any]], int, str]] = {
    "bad json": (lambda: with_body(load_event("post_message"), "{not json"), 400, "bad_json"),
    "not an object": (lambda: with_body(load_event("post_message"), "[1, 2]"), 400, "bad_json"),
    "empty message": (lambda: with_body(load_event("post_message"), {"message": ""}), 400, "invalid_input"),
    "no credentials": (lambda: with_auth(load_event("post_message"), None), 401, "unauthorized"),
    "wrong password": (lambda: with_auth(load_event("post_message"), "admin", "nope"), 401, "unauthorized"),
    "unknown agent": (
        lambda: _rename(load_event("post_message"), "/agents/nobody/messages"),
        404,
        "not_found",
    ),
    "unknown turn": (lambda: load_event("get_turn"), 404, "not_found"),
    "unknown session": (lambda: load_event("get_session"), 404, "not_found"),
    "too large": (
        lambda: with_body(load_event("post_message"), {"message": "x" * 300_000}),
        413,
        "too_large",
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_error_statuses_on_dynamodb(dep: Deployment, case: str) -> None:
    make, status, code = ERRORS[case]
    got, body = call(api.handler, make())
    assert (got, body["error"]) == (status, code)
    assert "Traceback" not in body["message"]
    assert dep.turn_items() == [], "a rejected request started nothing"


def test_args_hash_mismatch_is_409_and_decides_nothing(dep: Deployment) -> None:
    first = paused()
    [refund] = first["pendingItems"]
    status, body = approve(refund["pendingId"], {"decision": "approve", "argsHash": "sha256:someoneelse"})
    assert (status, body["error"]) == (409, "conflict")
    turn = get_turn(first["turnId"])
    assert turn["status"] == "paused" and audit(turn, "decided") == []
    assert dep.invoker.invoked == []
    # the same item with the hash the reviewer saw goes through
    status, body = approve(refund["pendingId"], {"decision": "approve", "argsHash": refund["argsHash"]})
    assert status == 202 and body["status"] == "resuming"
