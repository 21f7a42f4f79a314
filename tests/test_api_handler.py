"""The api, resume and schedule handlers, driven by the sample events in events/ (GIVEN / WHEN / THEN)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopengine.app.engine import Engine
from loopengine.app.invokers import RecordingInvoker
from loopengine.http import api
from loopengine.http.functions import resume, schedule
from tests.handler_support import (
    PLACEHOLDER_TURN,
    FakeContext,
    InstallRoot,
    call,
    lambda_context,
    load_event,
    with_auth,
    with_body,
)


@pytest.fixture
def engine(install_root: InstallRoot) -> Engine:
    return install_root(lambda _engine: RecordingInvoker())  # the test delivers resume events itself


def _deliver(engine: Engine) -> None:
    """Deliver the queued resume events through the resume handler (Lambda's async invoke)."""
    invoker = engine.rt.invoker
    assert isinstance(invoker, RecordingInvoker)
    while invoker.invoked:
        resume.handler(load_event("resume", turnId=invoker.invoked.pop(0)), lambda_context(FakeContext()))


def _pause() -> tuple[int, dict[str, Any]]:
    return call(api.handler, load_event("post_message"))


def test_health_needs_no_credentials(engine: Engine) -> None:
    status, body = call(api.handler, with_auth(load_event("health"), None))
    assert (status, body) == (200, {"status": "ok"})


def test_message_pauses_on_the_refund(engine: Engine) -> None:
    status, body = _pause()
    assert status == 202
    assert body["status"] == "paused" and body["pending"] is True
    assert body["stopReason"] == "pending_approval"
    [item] = body["pendingItems"]
    assert item["tool"] == "issue_refund" and item["kind"] == "approval"
    assert item["args"] == {"order_id": "A-1001", "amount": 212.0, "reason": "arrived broken"}
    assert item["argsHash"].startswith("sha256:")
    assert set(body) >= {"sessionId", "turnId"}


@pytest.mark.parametrize("user,password", [(None, ""), ("admin", "wrong"), ("eve", "secret")])
def test_credentials_are_required(engine: Engine, user: str | None, password: str) -> None:
    status, body = call(api.handler, with_auth(load_event("post_message"), user, password))
    assert status == 401 and body["error"] == "unauthorized"


def test_jwt_claims_identify_the_decider(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    _, paused = _pause()
    pending = paused["pendingItems"][0]["pendingId"]
    event = with_auth(load_event("resolve_approve", pendingId=pending), None)
    claims = {"iss": "https://issuer.example/", "sub": "user-42", "tenant": ""}
    event["requestContext"]["authorizer"] = {"jwt": {"claims": claims, "scopes": None}}
    status, _ = call(api.handler, event)
    assert status == 403  # an empty tenant claim names no tenant, and no default tenant is set
    claims["tenant"] = "[]"
    assert call(api.handler, event)[0] == 403
    event["requestContext"]["authorizer"]["jwt"]["claims"] = {**claims, "tenant": "acme"}
    assert call(api.handler, event)[0] == 404  # the item is in the default tenant, not acme's
    event["requestContext"]["authorizer"]["jwt"]["claims"] = claims
    monkeypatch.setenv("LOOPENGINE_JWT_DEFAULT_TENANT", "-")  # tokens without a tenant: the default ""
    assert call(api.handler, event)[0] == 202
    decided = [e for e in engine.rt.stores.turns.events(paused["turnId"]) if e["type"] == "decided"]
    assert decided[0]["decidedBy"] == "jwt:https://issuer.example/user-42" and decided[0]["channel"] == "api"


@pytest.mark.parametrize(
    "body,status,code",
    [
        ("{not json", 400, "bad_json"),
        ("[1, 2]", 400, "bad_json"),
        ({"message": ""}, 400, "invalid_input"),
        ({"message": 42}, 400, "invalid_input"),
        ({"message": "hi", "sessionId": 7}, 400, "invalid_input"),
        ({"message": "x" * 300_000}, 413, "too_large"),
    ],
)
def test_bad_message_bodies(engine: Engine, body: Any, status: int, code: str) -> None:
    got, reply = call(api.handler, with_body(load_event("post_message"), body))
    assert (got, reply["error"]) == (status, code)
    assert "Traceback" not in reply["message"]


def test_unknown_agent_is_404(engine: Engine) -> None:
    event = load_event("post_message")
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/agents/nobody/messages"
    status, body = call(api.handler, event)
    assert status == 404 and body["error"] == "not_found"


def test_unknown_route_is_404_json_and_401_without_credentials(engine: Engine) -> None:
    event = load_event("health")
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/nope"
    assert call(api.handler, event)[0] == 401  # deny by default: no route table for strangers
    status, body = call(api.handler, with_auth(event, "admin"))
    assert status == 404 and body["error"] == "not_found"


def test_approve_resume_chain_finish_through_handlers(engine: Engine) -> None:
    # GIVEN a turn paused on the refund
    _, paused = _pause()
    turn_id, first = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    # WHEN it is approved, the last outstanding item: the resume is queued, not run inline
    status, body = call(api.handler, load_event("resolve_approve", pendingId=first))
    assert status == 202
    assert body == {"resolved": True, "outstanding": 0, "status": "resuming", "turnId": turn_id}
    invoker = engine.rt.invoker
    assert isinstance(invoker, RecordingInvoker) and invoker.invoked == [turn_id]
    # AND the resume event is delivered twice (Lambda async is at least once)
    first_run = resume.handler(load_event("resume", turnId=turn_id), lambda_context(FakeContext()))
    duplicate = resume.handler(load_event("resume", turnId=turn_id), lambda_context(FakeContext()))
    # THEN it resumed once and paused again on the refund email (chained)
    assert first_run["resumed"] is True and first_run["status"] == "paused"
    assert duplicate == {"resumed": False, "turnId": turn_id}
    status, turn = call(api.handler, load_event("get_turn", turnId=turn_id))
    assert status == 200 and turn["status"] == "paused"
    [email] = turn["pendingItems"]
    assert email["tool"] == "send_email" and email["args"]["intent"] == "refund"
    assert [e["type"] for e in turn["audit"]].count("resumed") == 1
    # WHEN the email is approved and resumed
    call(api.handler, load_event("resolve_approve", pendingId=email["pendingId"]))
    resume.handler(load_event("resume", turnId=turn_id), lambda_context(FakeContext()))
    # THEN the turn finished with the final reply, and the session history is protocol-valid
    _, turn = call(api.handler, load_event("get_turn", turnId=turn_id))
    assert turn["status"] == "finished" and turn["stopReason"] == "end_turn"
    assert "refunded" in turn["text"]
    status, session = call(
        api.handler,
        load_event("get_session", **{"ses_00000000000000000000000000000000": paused["sessionId"]}),
    )
    assert status == 200 and session["sessionId"] == paused["sessionId"]
    roles = [m["role"] for m in session["messages"]]
    assert roles[0] == "user" and roles[-1] == "assistant"
    # AND a late click is a harmless no-op
    assert call(api.handler, load_event("resolve_approve", pendingId=first)) == (
        200,
        {"alreadyResolved": True},
    )


def test_deny_finishes_denied(engine: Engine) -> None:
    _, paused = _pause()
    pending = paused["pendingItems"][0]["pendingId"]
    status, body = call(api.handler, load_event("resolve_deny", pendingId=pending))
    assert status == 200
    assert body == {
        "resolved": True,
        "outstanding": 0,
        "status": "finished",
        "stopReason": "denied",
        "turnId": paused["turnId"],
    }


def test_invalid_edit_is_400_and_the_item_stays_open(engine: Engine) -> None:
    _, paused = _pause()
    pending = paused["pendingItems"][0]["pendingId"]
    bad = {"decision": "approve", "editedArgs": {"order_id": "A-1001", "amount": "lots"}}
    status, body = call(api.handler, with_body(load_event("resolve_edit", pendingId=pending), bad))
    assert status == 400 and "amount" in body["message"]
    status, body = call(api.handler, load_event("resolve_edit", pendingId=pending))
    assert status == 202 and body["status"] == "resuming"
    _deliver(engine)
    [refund] = [
        c for c in engine.rt.stores.turns.calls(paused["turnId"]).values() if c.tool == "issue_refund"
    ]
    history = engine.history(paused["sessionId"])
    [result] = [r for m in history for r in m.tool_results if r.tool_use_id == refund.tool_use_id]
    assert refund.outcome == "ok" and '"amount": 100.0' in result.content


def test_args_hash_mismatch_is_409(engine: Engine) -> None:
    _, paused = _pause()
    pending = paused["pendingItems"][0]["pendingId"]
    body = {"decision": "approve", "argsHash": "sha256:someoneelse"}
    status, reply = call(api.handler, with_body(load_event("resolve_approve", pendingId=pending), body))
    assert status == 409 and reply["error"] == "conflict"


def test_wrong_kind_and_bad_decision_are_400(engine: Engine) -> None:
    _, paused = _pause()
    pending = paused["pendingItems"][0]["pendingId"]
    status, body = call(api.handler, load_event("answer_question", pendingId=pending))
    assert status == 400 and f"/pending-approvals/{pending}/resolve" in body["message"]
    event = with_body(load_event("resolve_approve", pendingId=pending), {"decision": "maybe"})
    assert call(api.handler, event)[0] == 400


def test_bad_wait_query_is_400(engine: Engine) -> None:
    _, paused = _pause()
    event = load_event("resolve_approve", pendingId=paused["pendingItems"][0]["pendingId"])
    event["rawQueryString"] = "wait=99"
    event["queryStringParameters"] = {"wait": "99"}
    assert call(api.handler, event)[0] == 400


def test_unknown_pending_id_is_already_resolved(engine: Engine) -> None:
    assert call(api.handler, load_event("resolve_approve")) == (200, {"alreadyResolved": True})
    assert call(api.handler, load_event("answer_question")) == (200, {"alreadyResolved": True})


def test_list_pending_filters_by_agent(engine: Engine) -> None:
    _, paused = _pause()
    status, body = call(api.handler, load_event("list_pending"))
    assert status == 200
    assert [i["pendingId"] for i in body["items"]] == [paused["pendingItems"][0]["pendingId"]]
    item = body["items"][0]
    assert item["agent"] == "customer-service" and item["turnId"] == paused["turnId"]
    event = load_event("list_pending")
    event["queryStringParameters"] = {"agent": "someone-else"}
    assert call(api.handler, event) == (200, {"items": []})


def test_unknown_turn_and_session_are_404(engine: Engine) -> None:
    assert call(api.handler, load_event("get_turn"))[0] == 404
    assert call(api.handler, load_event("get_session"))[0] == 404


def test_a_new_message_supersedes_a_parked_turn(engine: Engine) -> None:
    _, paused = _pause()
    body = {"message": "Order A-1002: where is it?", "sessionId": paused["sessionId"]}
    status, reply = call(api.handler, with_body(load_event("post_message"), body))
    assert status == 200 and reply["stopReason"] == "end_turn"
    old = engine.turn(paused["turnId"])
    assert old.status.value == "finished" and old.stop_reason is not None
    assert old.stop_reason.value == "superseded"
    late = load_event("resolve_approve", pendingId=paused["pendingItems"][0]["pendingId"])
    assert call(api.handler, late) == (200, {"alreadyResolved": True})


def test_schedule_starts_an_unattended_turn(engine: Engine) -> None:
    out = schedule.handler(load_event("schedule_turn"), lambda_context(FakeContext()))
    assert out["started"] is True
    started = [e for e in engine.rt.stores.turns.events(out["turnId"]) if e["type"] == "started"]
    assert started[0]["trigger"] == "schedule"


def test_schedule_rejects_bad_input_without_raising(engine: Engine) -> None:
    assert schedule.handler({"message": "no agent"}, lambda_context(FakeContext()))["started"] is False
    assert (
        schedule.handler({"agent": "nobody", "message": "x"}, lambda_context(FakeContext()))["started"]
        is False
    )


def test_resume_without_turn_id_does_not_raise(engine: Engine) -> None:
    assert resume.handler({}, lambda_context(FakeContext()))["resumed"] is False


def test_every_sample_event_is_answered_without_a_500(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as `sam local invoke --env-vars events/env.json` runs them: its magic-link secret is also the key
    # of the inbox's form tokens (a decision without a key is refused 503)
    env = json.loads(Path("events/env.json").read_text())["Parameters"]
    monkeypatch.setenv("LOOPENGINE_MAGIC_LINK_SECRET", env["LOOPENGINE_MAGIC_LINK_SECRET"])
    for path in sorted(Path("events").glob("*.json")):
        event = json.loads(path.read_text())
        if "routeKey" not in event:
            continue
        status, body = call(api.handler, event)
        assert status < 500, (path.name, status, body)


def test_resume_of_a_turn_that_does_not_exist_answers_instead_of_raising(engine: Engine) -> None:
    # `sam local invoke ResumeFunction -e events/resume.json` on an empty store; in AWS a
    # retry could not make the turn appear, so it must not fail into the redrive queue.
    answer = resume.handler(load_event("resume"), lambda_context(FakeContext()))
    assert answer == {"resumed": False, "turnId": PLACEHOLDER_TURN, "reason": "no such turn"}
