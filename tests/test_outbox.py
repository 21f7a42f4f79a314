"""Notifications go through the outbox: retried with backoff by the sweep, at least once, stable eventId."""

from __future__ import annotations

from loopengine.app.request.resolution import Decider
from loopengine.domain import outbox
from loopengine.domain.decisions import Approval
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.harness import Calls, agent
from tests.scenario import events, scenario

RULES = {"rules": [], "default_decision": "ask"}


def test_a_receiver_that_is_down_gets_the_approval_later_with_the_same_event_id() -> None:
    calls = Calls()
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="r1")), say("done")])
    with scenario(agent("shop", [calls.tool("refund")], RULES), model=model, fail_notify=True) as h:
        out = h.engine.send_message("shop", "refund")
        assert h.notifier.sent == []
        (failed,) = [
            e for e in events(h, out.turn_id, "notification_failed") if e["notification"] == "approval"
        ]

        h.clock.advance(outbox.FIRST_RETRY_SECONDS)
        h.engine.sweep()  # still down: the next try waits twice as long
        h.notifier.fail = False
        h.clock.advance(outbox.FIRST_RETRY_SECONDS)
        assert h.engine.sweep().notified == 0  # not due yet
        h.clock.advance(outbox.FIRST_RETRY_SECONDS)
        assert h.engine.sweep().notified >= 1

        (note,) = h.notifier.events("approval")
        assert note["eventId"] == failed["eventId"]
        assert note["pendingId"] == out.pending[0].pending_id
        h.clock.advance(outbox.MAX_BACKOFF_SECONDS)
        h.engine.sweep()
        assert len(h.notifier.events("approval")) == 1  # delivered: never sent again
        assert h.engine.resolve(note["pendingId"], Approval(), Decider("ops")).completed
        assert calls.count("refund") == 1


def test_a_receiver_that_never_comes_back_is_given_up_and_recorded() -> None:
    calls = Calls()
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="r1")), say("done")])
    with scenario(agent("shop", [calls.tool("refund")], RULES), model=model, fail_notify=True) as h:
        out = h.engine.send_message("shop", "refund")
        for _ in range(outbox.MAX_ATTEMPTS + 2):
            h.clock.advance(outbox.MAX_BACKOFF_SECONDS)
            h.engine.sweep()

        tries = [e for e in events(h, out.turn_id, "notification_failed") if e["notification"] == "approval"]
        assert len(tries) == outbox.MAX_ATTEMPTS
        gave_up = [e["notification"] for e in events(h, out.turn_id, "notification_gave_up")]
        assert sorted(gave_up) == ["approval", "run_start"]
        assert h.rt.stores.turns.due_outbox(h.clock.now() + 10**9) == []
        assert h.engine.outcome(out.turn_id).pending  # the item itself is still open, never lost
