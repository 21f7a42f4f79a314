"""The turn event stream (GET /turns/{turnId}/events), the live channel's decisions and live_wait.

GIVEN a turn that pauses on an approval, WHEN its events are read (engine and api handler), THEN
they come in order with a stable ``seq``, ``after`` / ``next`` page through them, a long poll
returns as soon as an event arrives, another tenant gets 404 and a bad query 400. A message sent
``live`` holds its pause's notifications for the agent's ``live_wait``; a decision made inline in
that window means the notification is never sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.authoring.registry import AgentRegistry
from loopengine.domain.base.errors import NotFound
from loopengine.domain.decisions import Approval, Denial
from loopengine.domain.principals import Principal
from loopengine.http import api
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.agent_folders import AGENT_YAML, write_agent
from tests.handler_support import call as call_handler
from tests.handler_support import load_event, with_auth, with_body
from tests.harness import Build, Calls, Harness, agent, make_harness

RULES = {"rules": [{"tool": "peek", "decision": "allow"}], "default_decision": "ask"}
SCRIPT = [
    call(use("peek", {"x": 1}, text="Let me look first.")),
    call(use("refund", {"x": 2})),
    call(use("refund", {"x": 3})),
    say("All refunded."),
]


def _agent(calls: Calls, **kw: Any) -> Any:
    return agent("shop", [calls.tool("peek"), calls.tool("refund")], RULES, **kw)


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    calls = Calls()
    built = make_harness(tmp_path / "events.db", _agent(calls), model=ScriptedModel.from_list(SCRIPT))
    yield built
    built.rt.stores.close()


def _pending(h: Harness, turn_id: str) -> str:
    return h.engine.outcome(turn_id).pending[0].pending_id


def test_events_come_in_order_with_seq_and_the_pending_details(h: Harness) -> None:
    out = h.engine.send_message("shop", "refund me")
    events, cursor, finished = h.engine.events(out.turn_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert cursor == len(events) and not finished
    kinds = [e["type"] for e in events]
    assert kinds[0] == "started" and kinds[kinds.index("paused") + 1] == "approval:pending"
    assert next(e for e in events if e["type"] == "model_response")["text"] == "Let me look first."
    assert {"type": "tool_outcome", "tool": "peek", "outcome": "ok"}.items() <= events[
        kinds.index("tool_outcome")
    ].items()
    offered = events[kinds.index("approval:pending")]
    item = out.pending[0]
    assert offered["pendingId"] == item.pending_id and offered["tool"] == "refund"
    assert offered["args"] == {"x": 2} and offered["argsHash"] == item.args_hash
    assert "liveUntil" not in offered  # not a live message


def test_after_and_next_page_through_the_events_and_seq_is_stable(h: Harness) -> None:
    out = h.engine.send_message("shop", "refund me")
    first, cursor, _ = h.engine.events(out.turn_id)
    assert h.engine.events(out.turn_id, after=cursor) == ([], cursor, False)
    h.engine.resolve(_pending(h, out.turn_id), Approval(), Principal("ann"))  # runs on to the chained pause
    later, cursor2, _ = h.engine.events(out.turn_id, after=cursor)
    assert later[0]["seq"] == cursor + 1 and cursor2 == later[-1]["seq"]
    assert later[0]["type"] == "decided" and "approval:pending" in [e["type"] for e in later]
    again, _, _ = h.engine.events(out.turn_id)
    assert again[: len(first)] == first  # earlier events keep their seq
    assert h.engine.events(out.turn_id, after=2)[0] == again[2:]


def test_a_long_poll_returns_as_soon_as_an_event_arrives(h: Harness) -> None:
    out = h.engine.send_message("shop", "refund me")
    _, cursor, _ = h.engine.events(out.turn_id)
    pauses: list[float] = []

    def sleep(seconds: float) -> None:  # stands in for the real pause: a decision arrives meanwhile
        pauses.append(seconds)
        if len(pauses) == 2:
            h.engine.resolve(_pending(h, out.turn_id), Denial(comment="no"), Principal("ann"))

    h.engine.sleep = sleep
    found, _, _ = h.engine.events(out.turn_id, after=cursor, wait=25)
    assert len(pauses) == 2  # it did not sleep on after the event
    finish = next(e for e in found if e["type"] == "finished")
    assert found[0]["type"] == "decided" and finish["stopReason"] == "denied"


def test_a_long_poll_with_nothing_new_waits_the_whole_window_then_returns_empty(h: Harness) -> None:
    out = h.engine.send_message("shop", "refund me")
    _, cursor, _ = h.engine.events(out.turn_id)
    pauses: list[float] = []
    h.engine.sleep = pauses.append
    assert h.engine.events(out.turn_id, after=cursor, wait=3) == ([], cursor, False)
    assert sum(pauses) == pytest.approx(3) and max(pauses) <= 0.5
    assert h.engine.events(out.turn_id, after=cursor, wait=999)[1] == cursor
    assert sum(pauses) == pytest.approx(28)  # capped at 25 s


def test_a_finished_turn_answers_at_once_and_says_so(h: Harness) -> None:
    out = h.engine.send_message("shop", "refund me")
    h.engine.resolve(_pending(h, out.turn_id), Denial(), Principal("ann"))
    h.engine.sleep = lambda _s: pytest.fail("a finished turn has nothing to wait for")
    events, cursor, finished = h.engine.events(out.turn_id, after=10_000, wait=25)
    assert (events, cursor, finished) == ([], 10_000, True)
    everything, _, _ = h.engine.events(out.turn_id)
    finish = next(e for e in everything if e["type"] == "finished")
    assert finish["stopReason"] == "denied" and finish["text"] is None


def test_another_tenant_gets_404(h: Harness) -> None:
    out = h.engine.send_message("shop", "refund me")
    with pytest.raises(NotFound):
        h.engine.events(out.turn_id, who=Principal("eve", tenants=frozenset({"acme"})))
    with pytest.raises(NotFound):
        h.engine.events("trn_" + "0" * 32)


# ------------------------------------------------------------------------------ the api route


def _events_event(turn_id: str, query: dict[str, str] | None = None, **headers: str) -> dict[str, Any]:
    event = load_event("turn_events", turnId=turn_id)
    event["queryStringParameters"] = query
    event["headers"] = {**event["headers"], **headers}
    return event


def test_route_answers_events_and_next(install_harness: Build) -> None:
    h = install_harness(_agent(Calls()), model=ScriptedModel.from_list(SCRIPT))
    out = h.engine.send_message("shop", "refund me")
    status, body = call_handler(api.handler, _events_event(out.turn_id))  # the sample: after=0, wait=0
    assert status == 200 and body["next"] == len(body["events"]) and body["finished"] is False
    assert "approval:pending" in [e["type"] for e in body["events"]]
    status, body = call_handler(api.handler, _events_event(out.turn_id, {"after": str(body["next"])}))
    assert status == 200 and body["events"] == []


@pytest.mark.parametrize(
    "query",
    [{"after": "-1"}, {"after": "1.5"}, {"after": "x"}, {"wait": "26"}, {"wait": "-1"}, {"wait": "nan"}],
)
def test_route_refuses_a_bad_query(install_harness: Build, query: dict[str, str]) -> None:
    h = install_harness(_agent(Calls()), model=ScriptedModel.from_list(SCRIPT))
    out = h.engine.send_message("shop", "refund me")
    status, body = call_handler(api.handler, _events_event(out.turn_id, query))
    assert status == 400 and body["error"] == "invalid_input"


def test_route_404s_a_typo_an_unknown_turn_and_another_tenants_turn(
    install_harness: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = [{"user": "eve", "password": "secret", "tenants": ["acme"]}]
    monkeypatch.setenv("LOOPENGINE_USERS", json.dumps(users))
    h = install_harness(_agent(Calls()), model=ScriptedModel.from_list(SCRIPT))
    out = h.engine.send_message("shop", "refund me")
    assert call_handler(api.handler, _events_event("trn_nope"))[0] == 404
    assert call_handler(api.handler, _events_event("trn_" + "1" * 32))[0] == 404
    status, body = call_handler(api.handler, with_auth(_events_event(out.turn_id), "eve"))
    assert status == 404 and out.turn_id in body["message"]
    assert call_handler(api.handler, with_auth(_events_event(out.turn_id), None))[0] == 401


def test_live_channel_header_is_recorded_with_the_decision(install_harness: Build) -> None:
    h = install_harness(_agent(Calls()), model=ScriptedModel.from_list(SCRIPT))
    out = h.engine.send_message("shop", "refund me")
    event = with_body(
        load_event("resolve_approve", pendingId=_pending(h, out.turn_id)), {"decision": "approve"}
    )
    bad = {**event, "headers": {**event["headers"], "x-loopengine-channel": "slack"}}
    assert call_handler(api.handler, bad)[0] == 400  # not a channel a caller may claim
    assert h.engine.outcome(out.turn_id).pending  # ... and nothing was decided
    live = {**event, "headers": {**event["headers"], "x-loopengine-channel": "live"}}
    assert call_handler(api.handler, live)[0] in (200, 202)
    decided = [e for e in h.engine.audit(out.turn_id) if e["type"] == "decided"]
    # the channel is the server's (the API route); the client's label is kept beside it, trusted for nothing
    assert (decided[0]["channel"], decided[0]["declaredChannel"]) == ("api", "live")
    assert decided[0]["decidedBy"] == "user:admin"


@pytest.mark.parametrize("live", ["yes", 1, None])
def test_messages_route_refuses_a_live_that_is_not_a_boolean(install_harness: Build, live: Any) -> None:
    install_harness(_agent(Calls()), model=ScriptedModel.from_list(SCRIPT))
    event = with_body(load_event("post_message").copy(), {"message": "refund me", "live": live})
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/agents/shop/messages"
    event["pathParameters"] = {"agent": "shop"}
    status, body = call_handler(api.handler, event)
    assert status == 400 and "live" in body["message"]


# ------------------------------------------------------------------------------ live_wait


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Harness]:
    config = _agent(Calls(), live_wait=45.0)  # longer than the outbox's first retry (30 s)
    built = make_harness(tmp_path / "live.db", config, model=ScriptedModel.from_list(SCRIPT))
    yield built
    built.rt.stores.close()


def test_a_live_pause_decided_inline_within_the_window_is_never_notified(live: Harness) -> None:
    out = live.engine.send_message("shop", "refund me", live=True)
    assert out.status.value == "paused"
    offered = live.engine.events(out.turn_id)[0][-1]
    assert offered["liveUntil"] == offered["at"] + 45
    assert live.notifier.events("approval") == []  # not sent with the pause
    live.clock.advance(40)
    live.engine.sweep()
    assert live.notifier.events("approval") == []  # not due yet
    pending_id = _pending(live, out.turn_id)
    live.engine.resolve(pending_id, Approval(), Principal("ann", "live"))
    live.clock.advance(10)  # the first window closes; the chained pause has a window of its own
    live.engine.sweep()
    assert pending_id not in [p["pendingId"] for p in live.notifier.events("approval")]
    dropped = [e for e in live.engine.audit(out.turn_id) if e["type"] == "notification_dropped"]
    assert [d["pendingId"] for d in dropped] == [pending_id]


def test_a_live_pause_nobody_decides_is_notified_when_the_window_closes(live: Harness) -> None:
    out = live.engine.send_message("shop", "refund me", live=True)
    live.clock.advance(44)
    live.engine.sweep()
    assert live.notifier.events("approval") == []
    live.clock.advance(2)
    live.engine.sweep()
    sent = live.notifier.events("approval")
    assert [p["pendingId"] for p in sent] == [_pending(live, out.turn_id)]
    live.clock.advance(3600)
    live.engine.sweep()
    assert len(live.notifier.events("approval")) == 1  # delivered once


def test_a_message_not_sent_live_notifies_at_once(live: Harness) -> None:
    out = live.engine.send_message("shop", "refund me")
    assert [p["pendingId"] for p in live.notifier.events("approval")] == [_pending(live, out.turn_id)]
    assert "liveUntil" not in live.engine.events(out.turn_id)[0][-1]


def test_live_wait_reaches_the_config_from_agent_yaml(tmp_path: Path) -> None:
    write_agent(tmp_path, "shop", agent=AGENT_YAML.format(name="shop") + "live_wait: 30s\n")
    assert AgentRegistry(None, [tmp_path]).get("shop").live_wait == 30.0
