"""Waiting safely (seed 004), every policy branch driven through the HTTP API handler.

Each test builds an engine in code (SQLite, FakeClock, scripted model, recording notifier), installs it
for the handlers with ``root.install`` and talks to it only with API Gateway events from ``events/``;
the assertions then read what was stored: turn records, session history, audit events, tool executions.
"""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any

import pytest

from loopengine.app.invokers import RecordingInvoker
from loopengine.authoring.agent import AgentConfig
from loopengine.aws.lambda_invoker import LambdaInvoker
from loopengine.domain.messages import Message, check_protocol
from loopengine.domain.policy import Expiry
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.http import api, root
from loopengine.http.functions import resume, schedule
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.handler_support import FakeContext, lambda_context, load_event, with_auth, with_body
from tests.handler_support import call as http
from tests.harness import Build, Calls, Harness, agent

AGENT = "waiter"
RULES: dict[str, Any] = {"rules": [{"tool": "free", "decision": "allow"}], "default_decision": "ask"}
HOURS = 3600.0

Reply = tuple[int, dict[str, Any]]


# --- fixtures ----------------------------------------------------


@pytest.fixture
def build(install_harness: Build, monkeypatch: pytest.MonkeyPatch) -> Build:
    """Build a harness on SQLite in tmp_path and install its engine for the handlers.

    The JWT callers here are users of the default tenant: the deployment maps a token's ``sub`` to
    ``user:<sub>`` and places tokens without a tenant claim in the default tenant.
    """
    monkeypatch.setenv("LOOPENGINE_JWT_IDENTITY", "user")
    monkeypatch.setenv("LOOPENGINE_JWT_DEFAULT_TENANT", "-")
    return install_harness


def waiter(calls: Calls, rules: dict[str, Any] | None = None, **kw: Any) -> AgentConfig:
    """The agent under test: ``gated`` asks (default), ``free`` is allowed."""
    return agent(AGENT, [calls.tool("gated"), calls.tool("free")], rules or RULES, **kw)


def gated_then(*more: Any) -> ScriptedModel:
    """A script whose first response calls the gated tool, then plays ``more``."""
    return ScriptedModel.from_list([call(use("gated", {"x": 1})), *more])


# --- HTTP --------------------------------------------------------


def post_message(message: str, session_id: str | None = None, name: str = AGENT) -> Reply:
    event = load_event("post_message")
    event["rawPath"] = event["requestContext"]["http"]["path"] = f"/agents/{name}/messages"
    event["pathParameters"] = {"agent": name}
    body: dict[str, Any] = {"message": message}
    if session_id is not None:
        body["sessionId"] = session_id
    return http(api.handler, with_body(event, body))


def resolve(pending_id: str, body: dict[str, Any] | None = None, event: str = "resolve_approve") -> Reply:
    raw = load_event(event, pendingId=pending_id)
    return http(api.handler, with_body(raw, body) if body is not None else raw)


def resolve_as(pending_id: str, claims: dict[str, Any], body: dict[str, Any] | None = None) -> Reply:
    """Resolve with the JWT authorizer's claims and no Basic credentials."""
    event = with_auth(load_event("resolve_approve", pendingId=pending_id), None)
    event["requestContext"]["authorizer"] = {"jwt": {"claims": claims, "scopes": None}}
    return http(api.handler, with_body(event, body or {"decision": "approve"}))


def cancel(turn_id: str) -> Reply:
    return http(api.handler, load_event("cancel_turn", turnId=turn_id))


def get_turn(turn_id: str) -> Reply:
    return http(api.handler, load_event("get_turn", turnId=turn_id))


def list_pending() -> list[dict[str, Any]]:
    event = load_event("list_pending")
    event["rawQueryString"] = f"agent={AGENT}"
    event["queryStringParameters"] = {"agent": AGENT}
    status, body = http(api.handler, event)
    assert status == 200
    items: list[dict[str, Any]] = body["items"]
    return items


def sweep() -> dict[str, Any]:
    out: dict[str, Any] = schedule.handler(load_event("schedule_sweep"), lambda_context(FakeContext()))
    return out


def pause(message: str = "please do the gated thing", session_id: str | None = None) -> dict[str, Any]:
    """Send a message that parks on one approval; return the 202 body."""
    status, body = post_message(message, session_id)
    assert status == 202, body
    assert body["status"] == "paused" and body["stopReason"] == "pending_approval"
    return body


# --- reading state -----------------------------------------------


def history(h: Harness, session_id: str) -> list[Message]:
    return h.rt.stores.sessions.load(session_id)


def results_of(h: Harness, session_id: str, tool: str) -> list[Any]:
    """The tool_results answering every call of ``tool`` in the session, in order (JSON parsed)."""
    msgs = history(h, session_id)
    found: list[Any] = []
    for i, msg in enumerate(msgs):
        for use_block in msg.tool_uses:
            if use_block.name != tool:
                continue
            assert i + 1 < len(msgs), f"the call of {tool} is unanswered"
            [block] = [b for b in msgs[i + 1].tool_results if b.tool_use_id == use_block.id]
            try:
                found.append(json.loads(block.content))
            except ValueError:
                found.append(block.content)
    return found


def events(h: Harness, turn_id: str, kind: str | None = None) -> list[dict[str, Any]]:
    every = h.rt.stores.turns.events(turn_id)
    return [e for e in every if kind is None or e["type"] == kind]


def assert_valid(h: Harness, session_id: str) -> list[Message]:
    """The stored history obeys the tool protocol and no finished turn left a tool_use open."""
    msgs = history(h, session_id)
    check_protocol(msgs)
    turns = h.rt.stores.turns.session_turns(session_id)
    if all(t.status is TurnStatus.FINISHED for t in turns):
        assert not msgs[-1].tool_uses, "a finished session left a tool_use unanswered"
    return msgs


def open_item(h: Harness, pending_id: str) -> bool:
    cp = h.rt.stores.checkpoints.find_by_pending(pending_id)
    return cp is not None and not cp.closed and pending_id in cp.outstanding


# --- 1. supersede ------------------------------------------------


def test_a_new_message_supersedes_the_wait(build: Build) -> None:
    # GIVEN a turn parked on an approval (default policy: supersede)
    calls = Calls()
    model = gated_then(say("Understood, a credit instead."))
    h = build(waiter(calls), model=model)
    paused = pause()
    old, sid = paused["turnId"], paused["sessionId"]
    pending = paused["pendingItems"][0]["pendingId"]
    # WHEN the user moves on with a new message on the same session
    status, reply = post_message("actually, just give the customer a credit", sid)
    # THEN the new turn runs and finishes
    assert status == 200, reply
    assert reply["status"] == "finished" and reply["stopReason"] == "end_turn"
    assert reply["turnId"] != old and reply["sessionId"] == sid
    # AND the old turn ended superseded, with a run_finish saying so
    record = h.engine.turn(old)
    assert record.status is TurnStatus.FINISHED and record.stop_reason is StopReason.SUPERSEDED
    finishes = [p for p in h.notifier.events("run_finish") if p["turnId"] == old]
    assert [p["stopReason"] for p in finishes] == ["superseded"]
    # AND the abandoned call is an unknown outcome about the user moving on: not denied, not failed
    [abandoned] = results_of(h, sid, "gated")
    assert abandoned["status"] == "unknown"
    assert "moved on" in abandoned["reason"] and "new message" in abandoned["reason"]
    assert abandoned["status"] not in ("denied", "error", "skipped")
    assert calls.count("gated") == 0
    stops = events(h, old, "stop_requested")
    assert [(e["reason"], e["decidedBy"]) for e in stops] == [("superseded", "user:admin")]
    # AND the new turn ran on a valid history, its request joining the two user messages
    msgs = assert_valid(h, sid)
    assert [m.role for m in msgs] == ["user", "assistant", "user", "user", "assistant"]
    request = model.requests[-1].messages
    roles = [m.role for m in request]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    joined = request[-1]
    assert joined.tool_results and "credit" in joined.text
    # AND a late click on the abandoned item is a harmless no-op
    assert resolve(pending) == (200, {"alreadyResolved": True})
    assert calls.count("gated") == 0


# --- 2. reject ---------------------------------------------------


def test_reject_answers_409_with_the_open_items_and_changes_nothing(build: Build) -> None:
    calls = Calls()
    h = build(waiter(calls, on_new_message="reject"), model=gated_then(say("done")))
    paused = pause()
    turn_id, sid = paused["turnId"], paused["sessionId"]
    before = history(h, sid)
    # WHEN a new message arrives while the turn is parked
    status, reply = post_message("and another thing", sid)
    # THEN 409 names the parked turn and its open items
    assert status == 409 and reply["error"] == "conflict"
    assert reply["turnId"] == turn_id
    assert reply["pendingItems"] == paused["pendingItems"]
    assert all("pendingId" in i for i in reply["pendingItems"])
    # AND nothing changed: same history, one turn, still paused, item still open
    assert history(h, sid) == before
    assert [t.turn_id for t in h.rt.stores.turns.session_turns(sid)] == [turn_id]
    assert h.engine.turn(turn_id).status is TurnStatus.PAUSED
    assert events(h, turn_id, "stop_requested") == []
    # AND the item is still resolvable
    status, body = resolve(paused["pendingItems"][0]["pendingId"])
    assert status == 202 and body["status"] == "resuming"
    assert h.engine.turn(turn_id).stop_reason is StopReason.END_TURN
    assert calls.count("gated") == 1
    assert_valid(h, sid)


# --- 3. queue ----------------------------------------------------


def test_queue_runs_the_message_after_the_parked_turn_finishes(build: Build) -> None:
    calls = Calls()
    model = gated_then(say("old turn done"), say("queued answer"))
    h = build(waiter(calls, on_new_message="queue"), model=model)
    paused = pause()
    turn_id, sid = paused["turnId"], paused["sessionId"]
    # WHEN a new message arrives while the turn is parked
    status, queued = post_message("the queued message", sid)
    # THEN it is queued, not in the history yet
    assert status == 202 and queued["status"] == "queued", queued
    queued_id = queued["turnId"]
    assert queued_id != turn_id and queued["sessionId"] == sid
    assert all("queued message" not in m.text for m in history(h, sid))
    assert h.engine.turn(turn_id).status is TurnStatus.PAUSED
    assert len(model.requests) == 1
    # WHEN the parked item is approved (InlineInvoker: everything runs within the resolve call)
    status, body = resolve(paused["pendingItems"][0]["pendingId"])
    assert status == 202 and body["status"] == "resuming"
    # THEN the old turn finished first, then the queued turn started and finished
    old = h.engine.turn(turn_id)
    assert old.status is TurnStatus.FINISHED and old.stop_reason is StopReason.END_TURN
    assert old.text == "old turn done"
    new = h.engine.turn(queued_id)
    assert new.status is TurnStatus.FINISHED and new.stop_reason is StopReason.END_TURN
    assert new.text == "queued answer"
    msgs = assert_valid(h, sid)
    texts = [m.text for m in msgs]
    assert texts.index("old turn done") < texts.index("the queued message") < texts.index("queued answer")
    assert calls.count("gated") == 1
    status, view = get_turn(queued_id)
    assert status == 200 and view["status"] == "finished" and view["stopReason"] == "end_turn"
    assert view["text"] == "queued answer"


def test_two_messages_queued_in_the_same_instant_both_run_in_order(build: Build) -> None:
    """Two queued turns with equal created_at must not each wait for the other (FakeClock: same instant)."""
    calls = Calls()
    model = gated_then(say("old turn done"), say("answer two"), say("answer three"))
    h = build(waiter(calls, on_new_message="queue"), model=model)
    paused = pause()
    sid = paused["sessionId"]
    status, second = post_message("message two", sid)
    assert status == 202 and second["status"] == "queued"
    status, third = post_message("message three", sid)
    assert status == 202 and third["status"] == "queued"
    assert resolve(paused["pendingItems"][0]["pendingId"])[0] == 202
    assert h.engine.turn(paused["turnId"]).stop_reason is StopReason.END_TURN
    assert h.engine.turn(second["turnId"]).status is TurnStatus.FINISHED
    assert h.engine.turn(third["turnId"]).status is TurnStatus.FINISHED
    texts = [m.text for m in assert_valid(h, sid)]
    assert texts.index("message two") < texts.index("answer two") < texts.index("message three")


def test_a_cancelled_queued_message_never_starts(build: Build) -> None:
    calls = Calls()
    model = gated_then(say("old turn done"), say("must not run"))
    h = build(waiter(calls, on_new_message="queue"), model=model)
    paused = pause()
    sid = paused["sessionId"]
    _, queued = post_message("the queued message", sid)
    status, body = cancel(queued["turnId"])
    assert status == 200 and body["stopReason"] == "cancelled" and body["status"] == "finished"
    assert resolve(paused["pendingItems"][0]["pendingId"])[0] == 202
    assert h.engine.turn(paused["turnId"]).stop_reason is StopReason.END_TURN
    assert h.engine.turn(queued["turnId"]).stop_reason is StopReason.CANCELLED
    assert all("queued message" not in m.text for m in assert_valid(h, sid))
    assert len(model.requests) == 2


# --- 4. cancel parked --------------------------------------------


def test_cancel_a_parked_turn(build: Build) -> None:
    calls = Calls()
    h = build(waiter(calls), model=gated_then(say("never")))
    paused = pause()
    turn_id, sid = paused["turnId"], paused["sessionId"]
    pending = paused["pendingItems"][0]["pendingId"]
    # WHEN the parked turn is cancelled
    status, body = cancel(turn_id)
    # THEN it finished cancelled at once, and the reply says what a stop cannot undo
    assert status == 200, body
    assert body["turnId"] == turn_id and body["status"] == "finished"
    assert body["stopReason"] == "cancelled" and body["cancelled"] is True
    assert "already" in body["note"] and "not" in body["note"]
    record = h.engine.turn(turn_id)
    assert record.status is TurnStatus.FINISHED and record.stop_reason is StopReason.CANCELLED
    # AND the item is recorded unknown (it did not run), the model was not called again
    [result] = results_of(h, sid, "gated")
    assert result["status"] == "unknown" and "cancelled" in result["reason"]
    assert calls.count("gated") == 0
    assert h.rt.stores.checkpoints.find_by_pending(pending).closed  # type: ignore[union-attr]
    assert_valid(h, sid)
    # AND a late click is alreadyResolved
    assert resolve(pending) == (200, {"alreadyResolved": True})
    # AND cancelling again changes nothing
    version, audit = h.engine.turn(turn_id).version, events(h, turn_id)
    status, again = cancel(turn_id)
    assert status == 200 and again["stopReason"] == "cancelled"
    assert h.engine.turn(turn_id).version == version and events(h, turn_id) == audit
    # AND cancelling an unknown turn is 404
    status, missing = cancel("trn_doesnotexist")
    assert status == 404 and missing["error"] == "not_found"


# --- 5. cancel running -------------------------------------------


def test_cancel_a_running_turn_between_two_calls(build: Build) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(_args: dict[str, Any]) -> Any:
        started.set()
        if not release.wait(10):
            raise TimeoutError("the test never released the slow tool")
        return {"slow": "done"}

    calls = Calls()
    rules = {"rules": [{"tool": "slow", "decision": "allow"}, {"tool": "fast", "decision": "allow"}]}
    config = agent(AGENT, [calls.tool("slow", fn=slow), calls.tool("fast")], rules)
    model = ScriptedModel.from_list(
        [call(use("slow", {"x": 1}), use("fast", {"x": 2})), say("must not be called")]
    )
    h = build(config, model=model)
    replies: list[Reply] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            replies.append(post_message("do both"))
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run, name="message", daemon=True)
    worker.start()
    try:
        assert started.wait(10), "the slow tool never started"
        [start] = h.notifier.events("run_start")
        # WHEN the turn is cancelled while its first call runs
        status, body = cancel(start["turnId"])
        assert status == 202, body
        assert body["status"] == "cancelling" and body["cancelled"] is False
    finally:
        release.set()
        worker.join(10)
    assert not worker.is_alive() and errors == []
    # THEN the request that ran the turn reports it cancelled
    [(status, reply)] = replies
    assert status == 200 and reply["status"] == "finished" and reply["stopReason"] == "cancelled"
    sid, turn_id = reply["sessionId"], reply["turnId"]
    # AND the first call finished and kept its result, the second never ran
    assert calls.count("slow") == 1 and calls.count("fast") == 0
    assert results_of(h, sid, "slow") == [{"slow": "done"}]
    [not_run] = results_of(h, sid, "fast")
    assert not_run["status"] == "not_run" and "cancelled" in not_run["reason"]
    record = h.engine.turn(turn_id)
    assert record.status is TurnStatus.FINISHED and record.stop_reason is StopReason.CANCELLED
    # AND the history is valid and the model was not asked again after the cancel
    assert_valid(h, sid)
    assert len(model.requests) == 1


# --- 6. sweep expiry ---------------------------------------------


def test_the_sweep_expires_an_item_as_nobody_answered_and_the_turn_resumes(build: Build) -> None:
    calls = Calls()
    model = gated_then(say("I could not get an answer in time."))
    h = build(waiter(calls, expiry=Expiry(72 * HOURS, "unknown")), model=model)
    paused = pause()
    turn_id, sid = paused["turnId"], paused["sessionId"]
    # nothing is due before the deadline
    h.clock.advance(71 * HOURS)
    assert sweep() == {"swept": 0}
    # WHEN the clock passes 72h and the sweep runs
    h.clock.advance(2 * HOURS)
    assert sweep() == {"swept": 1}
    # THEN the item is "nobody answered" (unknown, never failed), the tool never ran
    [result] = results_of(h, sid, "gated")
    assert result["status"] == "unknown" and "nobody answered within" in result["reason"]
    assert calls.count("gated") == 0
    # AND the turn resumed: the model was told and finished the turn
    assert len(model.requests) == 2
    record = h.engine.turn(turn_id)
    assert record.status is TurnStatus.FINISHED and record.stop_reason is StopReason.END_TURN
    [expired] = events(h, turn_id, "expired")
    assert expired["decidedBy"] == "policy"
    assert expired["pendingId"] == paused["pendingItems"][0]["pendingId"]
    assert_valid(h, sid)
    assert list_pending() == []
    assert sweep() == {"swept": 0}


def test_expiry_with_on_expiry_deny_is_a_denial_the_model_is_told_about(build: Build) -> None:
    calls = Calls()
    model = gated_then(say("Nobody approved it, so I did not do it."))
    h = build(waiter(calls, expiry=Expiry(72 * HOURS, "deny")), model=model)
    paused = pause()
    turn_id, sid = paused["turnId"], paused["sessionId"]
    h.clock.advance(72 * HOURS + 1)
    assert sweep() == {"swept": 1}
    [result] = results_of(h, sid, "gated")
    assert result["status"] == "denied"
    assert "nobody answered within" in result["reason"] and "policy" in result["reason"]
    assert calls.count("gated") == 0
    # the turn still resumes: expiry is a policy, not a reviewer's "no"
    assert len(model.requests) == 2
    record = h.engine.turn(turn_id)
    assert record.stop_reason is not StopReason.DENIED and record.stop_reason is StopReason.END_TURN
    assert_valid(h, sid)


@pytest.mark.parametrize("on_expiry", ["unknown", "deny"])
def test_expiry_wording_names_the_configured_ttl(build: Build, on_expiry: str) -> None:
    """A 72h pending_ttl is reported as 72h (policy.describe's own docstring: 259200 -> "72h")."""
    calls = Calls()
    h = build(waiter(calls, expiry=Expiry(72 * HOURS, on_expiry)), model=gated_then(say("ok")))
    paused = pause()
    h.clock.advance(72 * HOURS + 1)
    assert sweep() == {"swept": 1}
    [result] = results_of(h, paused["sessionId"], "gated")
    assert "nobody answered within 72h" in result["reason"], result["reason"]


# --- 6b. sweep recovers turns whose runner died --------------------


class Died(BaseException):
    """The process running the turn dies here (no ``except Exception`` in the library catches it)."""


def dies_first_time(calls: Calls, name: str) -> Any:
    """A tool that records each execution and kills its process the first time it runs."""
    state = {"died": False}

    def fn(args: dict[str, Any]) -> Any:
        if not state["died"]:
            state["died"] = True
            raise Died(f"{name} took its process down")
        return {"ok": True}

    return calls.tool(name, fn=fn)


def test_the_sweep_hands_on_a_turn_whose_runner_died_mid_batch(build: Build) -> None:
    # GIVEN a turn whose process died running the first of two allowed calls
    calls = Calls()
    model = ScriptedModel.from_list(
        [call(use("free", {"x": 1}, id="f1"), use("free", {"x": 2}, id="f2")), say("One is unconfirmed.")]
    )
    cfg = agent(AGENT, [dies_first_time(calls, "free")], RULES)
    h = build(cfg, model=model)
    with pytest.raises(Died):
        post_message("do two free things")
    turn_id = h.notifier.events("run_start")[0]["turnId"]
    stuck = h.engine.turn(turn_id)
    assert stuck.status is TurnStatus.RUNNING
    # WHEN the sweep runs while its lease still holds, nothing is taken over (the runner may be alive)
    h.clock.advance(h.rt.lease_seconds - 1)
    assert sweep() == {"swept": 0}
    assert h.engine.turn(turn_id) == stuck and len(model.requests) == 1
    # WHEN the lease has run out
    h.clock.advance(2)
    assert sweep() == {"swept": 0, "recovered": 1}
    # THEN the turn was continued from its records and finished
    record = h.engine.turn(turn_id)
    assert record.status is TurnStatus.FINISHED and record.stop_reason is StopReason.END_TURN
    # AND the call that had started is reported unknown and was not run again; the other one ran
    assert calls.log == [("free", {"x": 1}), ("free", {"x": 2})]
    [unknown, ran] = results_of(h, stuck.session_id, "free")
    assert unknown["status"] == "unknown" and ran == {"ok": True}
    assert len(model.requests) == 2
    assert_valid(h, stuck.session_id)
    # AND a later sweep finds nothing left to recover
    h.clock.advance(h.rt.lease_seconds + 1)
    assert sweep() == {"swept": 0}


# --- 7. resolve expiry -------------------------------------------


def test_a_click_after_the_ttl_gets_the_expiry_answer_not_the_tool(build: Build) -> None:
    calls = Calls()
    model = gated_then(say("Too late."))
    h = build(waiter(calls, expiry=Expiry(72 * HOURS)), model=model)
    paused = pause()
    turn_id, sid = paused["turnId"], paused["sessionId"]
    pending = paused["pendingItems"][0]["pendingId"]
    h.clock.advance(73 * HOURS)
    # WHEN someone clicks approve before any sweep ran
    assert resolve(pending) == (200, {"alreadyResolved": True, "expired": True})
    # THEN the tool never ran and the item got the expiry result; the turn went on
    assert calls.count("gated") == 0
    [result] = results_of(h, sid, "gated")
    assert result["status"] == "unknown" and "nobody answered within" in result["reason"]
    assert [e["decidedBy"] for e in events(h, turn_id, "expired")] == ["policy"]
    assert events(h, turn_id, "decided") == []
    assert h.engine.turn(turn_id).stop_reason is StopReason.END_TURN
    # AND a sweep afterwards finds nothing, a second click is plain alreadyResolved
    assert sweep() == {"swept": 0}
    assert resolve(pending) == (200, {"alreadyResolved": True})
    assert_valid(h, sid)


def test_a_rules_pending_ttl_wins_over_the_agents(build: Build) -> None:
    calls = Calls()
    rules = {"rules": [{"tool": "gated", "decision": "ask", "pending_ttl": "1h"}], "default_decision": "ask"}
    h = build(waiter(calls, rules, expiry=Expiry(72 * HOURS)), model=gated_then(say("ok")))
    paused = pause()
    pending = paused["pendingItems"][0]["pendingId"]
    h.clock.advance(2 * HOURS)  # past the rule's 1h, well within the agent's 72h
    assert resolve(pending) == (200, {"alreadyResolved": True, "expired": True})
    assert calls.count("gated") == 0
    [result] = results_of(h, paused["sessionId"], "gated")
    assert result["status"] == "unknown" and "nobody answered within 1h" in result["reason"]
    assert sweep() == {"swept": 0}


def test_an_item_within_its_ttl_resolves_normally(build: Build) -> None:
    calls = Calls()
    h = build(waiter(calls, expiry=Expiry(72 * HOURS)), model=gated_then(say("ok")))
    paused = pause()
    h.clock.advance(71 * HOURS)
    status, body = resolve(paused["pendingItems"][0]["pendingId"])
    assert status == 202 and body["status"] == "resuming"
    assert calls.count("gated") == 1
    assert events(h, paused["turnId"], "expired") == []


def test_the_sweep_expires_only_the_due_item_of_a_batch(build: Build) -> None:
    calls = Calls()
    rules = {
        "rules": [
            {
                "tool": "gated",
                "when": {"field": "x", "op": "eq", "value": 1},
                "pending_ttl": "1h",
                "decision": "ask",
            }
        ],
        "default_decision": "ask",
    }
    model = ScriptedModel.from_list([call(use("gated", {"x": 1}), use("gated", {"x": 2})), say("done")])
    h = build(waiter(calls, rules, expiry=Expiry(72 * HOURS)), model=model)
    paused = pause()
    turn_id, sid = paused["turnId"], paused["sessionId"]
    short, long = paused["pendingItems"]
    assert (short["args"], long["args"]) == ({"x": 1}, {"x": 2})
    h.clock.advance(2 * HOURS)
    assert sweep() == {"swept": 1}
    # the other item is still open and the turn still parked
    assert [i["pendingId"] for i in list_pending()] == [long["pendingId"]]
    assert h.engine.turn(turn_id).status is TurnStatus.PAUSED and len(model.requests) == 1
    status, body = resolve(long["pendingId"])
    assert status == 202 and body["status"] == "resuming"
    first, second = results_of(h, sid, "gated")
    assert first["status"] == "unknown" and "nobody answered within 1h" in first["reason"]
    assert second == {"tool": "gated", "args": {"x": 2}}
    assert calls.log == [("gated", {"x": 2})]
    assert h.engine.turn(turn_id).stop_reason is StopReason.END_TURN
    assert_valid(h, sid)


def test_an_answer_after_the_ttl_gets_the_expiry_answer(build: Build) -> None:
    calls = Calls()
    model = ScriptedModel.from_list([call(use("system_ask_user", {"question": "Which card?"})), say("ok")])
    h = build(waiter(calls, expiry=Expiry(HOURS)), model=model)
    status, paused = post_message("refund it")
    assert status == 202 and paused["stopReason"] == "pending_question"
    pending = paused["pendingItems"][0]["pendingId"]
    h.clock.advance(HOURS + 1)
    got = http(api.handler, load_event("answer_question", pendingId=pending))
    assert got == (200, {"alreadyResolved": True, "expired": True})
    [result] = results_of(h, paused["sessionId"], "system_ask_user")
    assert result["status"] == "unknown" and "nobody answered within 1h" in result["reason"]
    assert h.engine.turn(paused["turnId"]).stop_reason is StopReason.END_TURN


# --- 8. approvers ------------------------------------------------


def _approver_rules(who: str) -> dict[str, Any]:
    return {"rules": [{"tool": "gated", "decision": "ask", "approvers": [who]}], "default_decision": "ask"}


def test_only_a_named_approver_may_decide(build: Build) -> None:
    calls = Calls()
    h = build(waiter(calls, _approver_rules("alice")), model=gated_then(say("done")))
    paused = pause()
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    # WHEN the admin (Basic auth) tries to approve
    status, body = resolve(pending)
    # THEN 403 and nothing is decided
    assert status == 403 and body["error"] == "forbidden"
    assert open_item(h, pending) and [i["pendingId"] for i in list_pending()] == [pending]
    assert events(h, turn_id, "decided") == [] and calls.count("gated") == 0
    # AND someone else with a JWT is refused too
    status, _ = resolve_as(pending, {"sub": "mallory"})
    assert status == 403 and open_item(h, pending)
    # WHEN alice approves with JWT claims (no Basic header)
    status, body = resolve_as(pending, {"sub": "alice"})
    # THEN it is accepted and the audit says alice decided
    assert status == 202 and body["status"] == "resuming"
    [decided] = events(h, turn_id, "decided")
    assert decided["decidedBy"] == "user:alice" and decided["channel"] == "api"
    assert calls.count("gated") == 1
    assert h.engine.turn(turn_id).stop_reason is StopReason.END_TURN


@pytest.mark.parametrize("groups", [["refund-managers"], "[refund-managers other]"])
def test_an_approver_group_matches_the_callers_groups(build: Build, groups: Any) -> None:
    calls = Calls()
    h = build(waiter(calls, _approver_rules("group:refund-managers")), model=gated_then(say("done")))
    paused = pause()
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    status, _ = resolve_as(pending, {"sub": "bob", "cognito:groups": ["support"]})
    assert status == 403 and open_item(h, pending)
    status, body = resolve_as(pending, {"sub": "bob", "cognito:groups": groups})
    assert status == 202, body
    [decided] = events(h, turn_id, "decided")
    assert decided["decidedBy"] == "user:bob"
    assert calls.count("gated") == 1


# --- 9. argsHash -------------------------------------------------


def test_args_hash_binds_the_decision_to_what_was_shown(build: Build) -> None:
    calls = Calls()
    h = build(waiter(calls), model=gated_then(say("done")))
    paused = pause()
    turn_id = paused["turnId"]
    [item] = paused["pendingItems"]
    [notified] = h.notifier.events("approval")
    assert notified["pendingId"] == item["pendingId"]
    assert notified["argsHash"] == item["argsHash"] and item["argsHash"].startswith("sha256:")
    # a different hash: 409, nothing decided
    wrong = {"decision": "approve", "argsHash": "sha256:" + "0" * 64}
    status, body = resolve(item["pendingId"], wrong)
    assert status == 409 and body["error"] == "conflict"
    assert open_item(h, item["pendingId"]) and events(h, turn_id, "decided") == []
    assert calls.count("gated") == 0
    # the right one: accepted
    status, body = resolve(item["pendingId"], {"decision": "approve", "argsHash": notified["argsHash"]})
    assert status == 202 and body["status"] == "resuming"
    assert calls.count("gated") == 1


# --- 10. sticky --------------------------------------------------


def test_a_turn_scoped_approval_covers_the_rest_of_the_turn_only(build: Build) -> None:
    calls = Calls()
    model = ScriptedModel.from_list(
        [
            call(use("gated", {"x": 1})),
            call(use("gated", {"x": 2})),
            say("both done"),
            call(use("gated", {"x": 3})),
            say("third done"),
        ]
    )
    h = build(waiter(calls), model=model)
    paused = pause()
    turn_id, sid = paused["turnId"], paused["sessionId"]
    # WHEN the first call is approved for the rest of the turn
    status, body = resolve(paused["pendingItems"][0]["pendingId"], {"decision": "approve", "scope": "turn"})
    assert status == 202, body
    # THEN the second call of the same tool ran without asking: two runs, one pause
    assert [args["x"] for _, args in calls.log] == [1, 2]
    record = h.engine.turn(turn_id)
    assert record.stop_reason is StopReason.END_TURN and record.text == "both done"
    assert len(events(h, turn_id, "paused")) == 1
    [sticky] = events(h, turn_id, "sticky_approval")
    assert sticky["tool"] == "gated" and sticky["scope"] == "turn" and sticky["decidedBy"] == "user:admin"
    assert len(events(h, turn_id, "auto_approved")) == 1
    assert len(h.notifier.events("approval")) == 1
    # AND a new turn on the same session asks again
    status, again = post_message("one more", sid)
    assert status == 202 and again["status"] == "paused", again
    assert again["pendingItems"][0]["args"] == {"x": 3}
    assert calls.count("gated") == 2
    assert events(h, again["turnId"], "auto_approved") == []
    assert_valid(h, sid)


def test_a_scope_broader_than_the_turn_is_400(build: Build) -> None:
    calls = Calls()
    h = build(waiter(calls), model=gated_then(say("done")))
    paused = pause()
    pending = paused["pendingItems"][0]["pendingId"]
    status, body = resolve(pending, {"decision": "approve", "scope": "forever"})
    assert status == 400 and body["error"] == "invalid_input"
    assert open_item(h, pending) and calls.count("gated") == 0


def test_a_turn_scoped_approval_does_not_cover_a_rule_with_approvers(build: Build) -> None:
    calls = Calls()
    model = ScriptedModel.from_list([call(use("gated", {"x": 1})), call(use("gated", {"x": 2})), say("done")])
    h = build(waiter(calls, _approver_rules("alice")), model=model)
    paused = pause()
    turn_id = paused["turnId"]
    status, _ = resolve_as(
        paused["pendingItems"][0]["pendingId"], {"sub": "alice"}, {"decision": "approve", "scope": "turn"}
    )
    assert status == 202
    # the second call asks alice again
    record = h.engine.turn(turn_id)
    assert record.status is TurnStatus.PAUSED and record.stop_reason is StopReason.PENDING_APPROVAL
    [again] = list_pending()
    assert again["args"] == {"x": 2} and again["turnId"] == turn_id
    assert events(h, turn_id, "auto_approved") == [] and calls.count("gated") == 1
    assert resolve_as(again["pendingId"], {"sub": "alice"})[0] == 202
    assert calls.count("gated") == 2 and h.engine.turn(turn_id).stop_reason is StopReason.END_TURN


# --- 11. edit / deny ---------------------------------------------


def test_edited_args_are_announced_to_the_model(build: Build) -> None:
    calls = Calls()
    h = build(waiter(calls), model=gated_then(say("done")))
    paused = pause()
    body = {"decision": "approve", "editedArgs": {"x": 5, "note": "halved"}}
    status, reply = resolve(paused["pendingItems"][0]["pendingId"], body, event="resolve_edit")
    assert status == 202, reply
    assert calls.log == [("gated", {"x": 5, "note": "halved"})]
    [result] = results_of(h, paused["sessionId"], "gated")
    assert result["reviewer_edited_args"] == {"x": 5, "note": "halved"}
    assert result["result"] == {"tool": "gated", "args": {"x": 5, "note": "halved"}}
    [decided] = events(h, paused["turnId"], "decided")
    assert decided["edited"] is True


def test_a_deny_comment_reaches_the_model(build: Build) -> None:
    calls = Calls()
    model = gated_then(say("never"))
    h = build(waiter(calls), model=model)
    paused = pause()
    status, reply = resolve(
        paused["pendingItems"][0]["pendingId"], {"decision": "deny", "comment": "too much"}, "resolve_deny"
    )
    assert status == 200 and reply["stopReason"] == "denied"
    [result] = results_of(h, paused["sessionId"], "gated")
    assert result["status"] == "denied" and result["comment"] == "too much"
    assert calls.count("gated") == 0 and len(model.requests) == 1
    assert h.engine.turn(paused["turnId"]).stop_reason is StopReason.DENIED
    assert_valid(h, paused["sessionId"])


# --- 12. audit ---------------------------------------------------


def test_the_audit_trail_of_a_pause_approve_finish(build: Build) -> None:
    calls = Calls()
    h = build(waiter(calls), model=gated_then(say("done")))
    paused = pause()
    turn_id = paused["turnId"]
    h.clock.advance(60)
    assert resolve(paused["pendingItems"][0]["pendingId"])[0] == 202
    status, view = get_turn(turn_id)
    assert status == 200 and view["status"] == "finished" and view["stopReason"] == "end_turn"
    audit = view["audit"]
    kinds = [e["type"] for e in audit]

    def at(kind: str, after: int = -1, **match: Any) -> int:
        for i, e in enumerate(audit):
            if i > after and e["type"] == kind and all(e.get(k) == v for k, v in match.items()):
                return i
        raise AssertionError(f"no {kind} {match} after #{after} in {kinds}")

    started = at("started")
    response = at("model_response", started)
    paused_at = at("paused", response)
    notified = at("notified", paused_at, notification="approval")
    decided = at("decided", notified)
    outcome = at("tool_outcome", decided)
    resumed = at("resumed", decided)
    finished = at("finished", max(resumed, outcome))
    assert finished == len(audit) - 1 or all(e["type"] == "notified" for e in audit[finished + 1 :])
    assert audit[notified]["channel"] == "recording"
    assert audit[decided]["decidedBy"] == "user:admin" and audit[decided]["channel"] == "api"
    assert audit[decided]["at"] == audit[paused_at]["at"] + 60
    assert audit[outcome]["tool"] == "gated" and audit[outcome]["outcome"] == "ok"
    assert audit[finished]["stopReason"] == "end_turn"
    # the resolve records the decision; the resumed worker runs the approved call
    assert decided < resumed < outcome < finished


# --- 13. versions ------------------------------------------------


def test_a_parked_turn_resumes_on_the_code_version_it_started_with(build: Build) -> None:
    calls = Calls()
    model = gated_then(say("done"), say("second turn"))
    h = build(waiter(calls), model=model, inline=False)
    invoker = h.rt.invoker
    assert isinstance(invoker, RecordingInvoker)
    h.rt.code_version = "7"
    paused = pause()
    turn_id, sid = paused["turnId"], paused["sessionId"]
    assert h.engine.turn(turn_id).code_version == "7"
    # a deploy while the turn waits
    h.rt.code_version = "8"
    status, body = resolve(paused["pendingItems"][0]["pendingId"])
    assert status == 202 and body["status"] == "resuming"
    assert invoker.invoked == [turn_id] and invoker.versions == ["7"]
    # the resume worker delivers it; the turn keeps its version
    out = resume.handler(load_event("resume", turnId=turn_id), lambda_context(FakeContext()))
    assert out["resumed"] is True and out["status"] == "finished"
    assert h.engine.turn(turn_id).code_version == "7"
    # the next turn runs on the new version
    status, reply = post_message("next", sid)
    assert status == 200 and reply["text"] == "second turn"
    assert h.engine.turn(reply["turnId"]).code_version == "8"


@pytest.mark.parametrize(("setting", "pinned"), [(None, True), ("true", True), ("false", False)])
def test_the_lambda_invoker_honours_the_pin_setting(setting: str | None, pinned: bool) -> None:
    env = {"LOOPENGINE_RESUME_FUNCTION": "loopengine-resume", "LOOPENGINE_RESUME_VERSION": "12"}
    if setting is not None:
        env["LOOPENGINE_PIN_RESUME_VERSION"] = setting
    invoker, local = root._invoker(env)
    assert local is None and isinstance(invoker, LambdaInvoker)
    assert invoker.function_name == "loopengine-resume" and invoker.qualifier == "12"
    assert invoker.pin is pinned
    assert invoker._client is None  # nothing talked to AWS
