"""Seed 000's worked example: four calls, two auto-allowed, two waiting on a human.

t1 lookup_order and t2 send_email are allowed and run at once; t3 issue_refund and t4 cancel_order
ask. Both approved (either order) -> one four-result message, model called again. One denied while
the other waits -> the other is skipped, never runs, the turn stops ``denied``. Late clicks on the
closed checkpoint are ``alreadyResolved`` no-ops.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loopengine.app import views
from loopengine.app.invokers import RecordingInvoker
from loopengine.app.request.resolution import Decider
from loopengine.app.worker.loop import merged
from loopengine.authoring.agent import AgentConfig
from loopengine.domain.checkpoint import PendingItem
from loopengine.domain.decisions import Approval, Denial, Reply
from loopengine.domain.messages import Message
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.harness import Calls, Harness, agent
from tests.scenario import assert_protocol, checkpoint, events, history, results, scenario, turn

ALICE = Decider("alice@example.com")
BOB = Decider("bob@example.com", channel="slack")
IDS = ["t1", "t2", "t3", "t4"]


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel.from_list(
        [
            call(
                use("lookup_order", {"x": 1}, id="t1", text="Looking into it."),
                use("send_email", {"x": 2}, id="t2"),
                use("issue_refund", {"x": 3}, id="t3"),
                use("cancel_order", {"x": 4}, id="t4"),
            ),
            say("All done."),
        ]
    )


def shop(calls: Calls) -> AgentConfig:
    """Seed 000's agent: lookups and emails allowed, refunds and cancellations asked."""
    return agent(
        "shop",
        [calls.tool(n) for n in ("lookup_order", "send_email", "issue_refund", "cancel_order")],
        {
            "rules": [
                {"tool": "lookup_order", "decision": "allow"},
                {"tool": "send_email", "decision": "allow"},
            ],
            "default_decision": "ask",
        },
    )


@pytest.fixture
def h(calls: Calls, model: ScriptedModel) -> Iterator[Harness]:
    with scenario(shop(calls), model=model) as harness:
        yield harness


def start(h: Harness) -> tuple[str, str, dict[str, PendingItem]]:
    """Send the message; return turn id, session id and the pending items by tool_use id."""
    out = h.engine.send_message("shop", "order A-1001 arrived broken")
    assert out.status is TurnStatus.PAUSED
    assert out.stop_reason is StopReason.PENDING_APPROVAL
    return out.turn_id, out.session_id, {p.tool_use_id: p for p in out.pending}


def test_the_pause(h: Harness, calls: Calls, model: ScriptedModel) -> None:
    turn_id, sid, pending = start(h)

    # t1 and t2 ran at once, t3 and t4 wait
    assert calls.count("lookup_order") == 1
    assert calls.count("send_email") == 1
    assert calls.count("issue_refund") == calls.count("cancel_order") == 0
    assert sorted(pending) == ["t3", "t4"]
    assert {p.kind for p in pending.values()} == {"approval"}
    # the checkpoint as seed 000 draws it
    cp = checkpoint(h, turn_id)
    assert [r.tool_use_id for r in cp.results_so_far] == ["t1", "t2"]
    assert results(Message("user", cp.results_so_far))["t1"] == {"tool": "lookup_order", "args": {"x": 1}}
    assert {i.tool_use_id for i in cp.outstanding.values()} == {"t3", "t4"}
    assert set(cp.outstanding) == {p.pending_id for p in pending.values()}
    assert not cp.closed
    assert (cp.session_id, cp.agent) == (sid, "shop")
    for pid in cp.outstanding:  # one pointer per pendingId, both at this checkpoint
        found = h.rt.stores.checkpoints.find_by_pending(pid)
        assert found is not None and found.id == cp.id
    # history ends at the dangling assistant message; the model was called once
    msgs = assert_protocol(h, sid)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert [u.id for u in msgs[-1].tool_uses] == IDS
    assert len(model.requests) == 1
    # each pending item was notified
    notified = h.notifier.events("approval")
    assert sorted(n["pendingId"] for n in notified) == sorted(cp.outstanding)
    assert all(n["turnId"] == turn_id for n in notified)
    stored = turn(h, turn_id)
    assert stored.status is TurnStatus.PAUSED
    assert stored.stop_reason is StopReason.PENDING_APPROVAL


@pytest.mark.parametrize("first", ["t3", "t4"])
def test_both_approved_in_either_order(h: Harness, calls: Calls, model: ScriptedModel, first: str) -> None:
    turn_id, sid, pending = start(h)
    second = "t4" if first == "t3" else "t3"

    res = h.engine.resolve(pending[first].pending_id, Approval(), ALICE)

    # the turn stays paused: nothing appended, model not called again
    assert not res.already_resolved
    assert res.outstanding == 1
    assert turn(h, turn_id).status is TurnStatus.PAUSED
    assert len(history(h, sid)) == 2
    assert len(model.requests) == 1
    cp = checkpoint(h, turn_id)
    assert [r.tool_use_id for r in cp.results_so_far] == ["t1", "t2"]
    assert [i.tool_use_id for i in cp.approved.values()] == [first]  # recorded; runs once all are in
    assert [i.tool_use_id for i in cp.outstanding.values()] == [second]
    assert h.engine.outcome(turn_id).pending == [pending[second]]

    res = h.engine.resolve(pending[second].pending_id, Approval(), BOB)

    assert res.outstanding == 0
    assert res.completed and not res.denied
    assert calls.count("issue_refund") == calls.count("cancel_order") == 1
    assert calls.count("lookup_order") == calls.count("send_email") == 1
    # one user message answers all four, right after the assistant message, in tool_use order
    msgs = assert_protocol(h, sid)
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert [r.tool_use_id for r in msgs[2].tool_results] == IDS
    answered = results(msgs[2])
    assert answered["t3"] == {"tool": "issue_refund", "args": {"x": 3}}
    assert answered["t4"] == {"tool": "cancel_order", "args": {"x": 4}}
    assert msgs[3].text == "All done."
    # the model was called again with the full picture
    assert len(model.requests) == 2
    assert model.requests[1].messages[:3] == msgs[:3]
    done = turn(h, turn_id)
    assert done.status is TurnStatus.FINISHED
    assert done.stop_reason is StopReason.END_TURN
    assert done.text == "All done."
    assert done.checkpoint_id is None
    # both decisions are on record, with who made them
    closed = h.rt.stores.checkpoints.find_by_pending(pending[first].pending_id)
    assert closed is not None and closed.closed and closed.complete
    cp = closed
    by = {d.pending_id: d for d in cp.decisions}
    assert by[pending[first].pending_id].decided_by == ALICE.identity
    assert by[pending[second].pending_id].decided_by == BOB.identity
    assert by[pending[second].pending_id].channel == "slack"
    assert h.rt.stores.checkpoints.list_open("") == []
    decided = events(h, turn_id, "decided")
    assert [e["decidedBy"] for e in decided] == [ALICE.identity, BOB.identity]


@pytest.mark.parametrize("denied", ["t3", "t4"])
def test_one_denied_skips_the_untouched_sibling(
    h: Harness, calls: Calls, model: ScriptedModel, denied: str
) -> None:
    turn_id, sid, pending = start(h)
    sibling = "t4" if denied == "t3" else "t3"

    res = h.engine.resolve(pending[denied].pending_id, Denial(comment="too expensive"), ALICE)

    assert res.denied and res.completed and res.outstanding == 0
    # the sibling's tool never ran; the deny ran nothing either
    assert calls.count("issue_refund") == calls.count("cancel_order") == 0
    # the results went out at once: real t1/t2, denial, skip
    msgs = assert_protocol(h, sid)
    assert [m.role for m in msgs] == ["user", "assistant", "user"]
    assert [r.tool_use_id for r in msgs[2].tool_results] == IDS
    answered = results(msgs[2])
    assert answered["t1"] == {"tool": "lookup_order", "args": {"x": 1}}
    assert answered["t2"] == {"tool": "send_email", "args": {"x": 2}}
    assert answered[denied]["status"] == "denied"
    assert answered[denied]["comment"] == "too expensive"
    assert answered[sibling]["status"] == "skipped"
    # the loop stopped: no model call, stopReason denied
    assert len(model.requests) == 1
    done = turn(h, turn_id)
    assert done.status is TurnStatus.FINISHED
    assert done.stop_reason is StopReason.DENIED
    cp = h.rt.stores.checkpoints.find_by_pending(pending[sibling].pending_id)
    assert cp is not None and cp.closed and cp.denied and cp.outstanding == {}
    kinds = {d.pending_id: d.kind for d in cp.decisions}
    assert kinds == {pending[denied].pending_id: "deny", pending[sibling].pending_id: "skipped"}
    # the deny was its own write: no worker ran, so nothing announced a run (DESIGN: a decision is one write)
    assert [e["trigger"] for e in h.notifier.events("run_start")] == ["message"]
    assert h.notifier.events("run_finish") == []

    # late clicks on the closed checkpoint: no-ops
    before_cp, before_events = cp.to_dict(), len(h.rt.stores.turns.events(turn_id))
    for pid, verdict in (
        (pending[sibling].pending_id, Approval()),
        (pending[sibling].pending_id, Denial()),
        (pending[denied].pending_id, Approval()),
    ):
        late = h.engine.resolve(pid, verdict, BOB)
        assert late.already_resolved
    assert calls.count("issue_refund") == calls.count("cancel_order") == 0
    assert history(h, sid) == msgs
    after = h.rt.stores.checkpoints.find_by_pending(pending[sibling].pending_id)
    assert after is not None and after.to_dict() == before_cp
    assert len(h.rt.stores.turns.events(turn_id)) == before_events
    assert len(model.requests) == 1


def test_approve_then_deny_runs_the_approved_call_and_skips_only_what_was_still_open(
    h: Harness, calls: Calls, model: ScriptedModel
) -> None:
    """Seed 000: a denial skips the items still outstanding; a call already approved runs (once).

    The approver was told "approved", so the call runs before the turn stops ``denied``, and the one
    tool_result message holds t1/t2's real results, t3's real result and t4's denial.
    """
    turn_id, sid, pending = start(h)

    h.engine.resolve(pending["t3"].pending_id, Approval(), ALICE)
    assert calls.count("issue_refund") == 0  # recorded; nothing runs before the batch closes
    res = h.engine.resolve(pending["t4"].pending_id, Denial(), BOB)

    assert res.denied
    assert calls.count("issue_refund") == 1
    assert calls.count("cancel_order") == 0
    answered = results(assert_protocol(h, sid)[2])
    assert answered["t3"] == {"tool": "issue_refund", "args": {"x": 3}}
    assert answered["t4"]["status"] == "denied"
    assert turn(h, turn_id).stop_reason is StopReason.DENIED
    assert len(model.requests) == 1
    # the approver's answer and the audit agree: approved, and it ran
    cp = h.rt.stores.checkpoints.find_by_pending(pending["t3"].pending_id)
    assert cp is not None and cp.closed and cp.denied
    kinds = {d.pending_id: d.kind for d in cp.decisions}
    assert kinds == {pending["t3"].pending_id: "approve", pending["t4"].pending_id: "deny"}
    ran = [e for e in events(h, turn_id, "tool_outcome") if e["tool"] == "issue_refund"]
    assert [e["outcome"] for e in ran] == ["ok"]
    # a late click on the approved item changes nothing and runs nothing again
    assert h.engine.resolve(pending["t3"].pending_id, Approval(), ALICE).already_resolved
    assert calls.count("issue_refund") == 1


def test_late_click_after_both_approved(h: Harness, calls: Calls, model: ScriptedModel) -> None:
    turn_id, sid, pending = start(h)
    for item in pending.values():
        h.engine.resolve(item.pending_id, Approval(), ALICE)
    before = history(h, sid)

    for item in pending.values():
        assert h.engine.resolve(item.pending_id, Approval(), ALICE).already_resolved
        assert h.engine.resolve(item.pending_id, Denial(), ALICE).already_resolved

    assert calls.count("issue_refund") == calls.count("cancel_order") == 1
    assert history(h, sid) == before
    assert len(model.requests) == 2
    assert turn(h, turn_id).stop_reason is StopReason.END_TURN


def test_unknown_pending_id_is_already_resolved(h: Harness, calls: Calls) -> None:
    turn_id, sid, _ = start(h)
    cp_before = checkpoint(h, turn_id).to_dict()

    assert h.engine.resolve("pnd_does_not_exist", Approval(), ALICE).already_resolved
    assert h.engine.resolve("pnd_does_not_exist", Denial(), ALICE).already_resolved
    assert h.engine.answer("pnd_does_not_exist", Reply("yes"), ALICE).already_resolved

    assert checkpoint(h, turn_id).to_dict() == cp_before
    assert calls.count("issue_refund") == calls.count("cancel_order") == 0
    assert len(history(h, sid)) == 2


def test_the_user_can_write_again_after_a_denial(calls: Calls) -> None:
    model = ScriptedModel.from_list(
        [
            call(use("lookup_order", {"x": 1}, id="t1"), use("issue_refund", {"x": 3}, id="t3")),
            say("Understood."),
        ]
    )
    cfg = agent("shop", [calls.tool("lookup_order"), calls.tool("issue_refund")], {"rules": []})
    with scenario(cfg, model=model) as h:
        out = h.engine.send_message("shop", "refund please")
        h.engine.resolve(out.pending[0].pending_id, Denial(), ALICE)
        assert turn(h, out.turn_id).stop_reason is StopReason.DENIED

        nxt = h.engine.send_message("shop", "ok, never mind", session_id=out.session_id)

        assert nxt.stop_reason is StopReason.END_TURN and nxt.text == "Understood."
        msgs = assert_protocol(h, out.session_id)
        assert [m.role for m in msgs] == ["user", "assistant", "user", "user", "assistant"]
        # the model sees the two user messages joined into one (results first, then the text)
        assert model.requests[-1].messages == merged(msgs[:4])
        assert len(model.requests[-1].messages) == 3


def test_a_denial_that_closes_a_batch_with_an_approved_call_hands_it_to_the_worker(
    calls: Calls, model: ScriptedModel
) -> None:
    """The deny request runs nothing: the approved call runs in the worker, within its budget.

    Issue 14: the request used to run the approved call itself, with no time budget, so a slow tool
    held it past the API's. It answers ``resuming`` (202) as an approval that closes a batch does;
    the worker runs the approved call once and the turn then finishes ``denied``.
    """
    with scenario(shop(calls), model=model, inline=False) as h:
        turn_id, _sid, pending = start(h)
        h.engine.resolve(pending["t3"].pending_id, Approval(), ALICE)
        res = h.engine.resolve(pending["t4"].pending_id, Denial(), BOB)

        assert (res.denied, res.resuming, res.outstanding) == (True, True, 0)
        status, body = views.resolution(res)
        assert (status, views.wire(body)) == (
            202,
            {"resolved": True, "outstanding": 0, "status": "resuming", "turnId": turn_id},
        )
        assert calls.count("issue_refund") == 0  # not in the request
        assert isinstance(h.invoker, RecordingInvoker)  # inline=False
        assert h.invoker.invoked == [turn_id]
        h.engine.resume(turn_id)  # the worker

        assert calls.count("issue_refund") == 1 and calls.count("cancel_order") == 0
        assert turn(h, turn_id).stop_reason is StopReason.DENIED


def test_a_denial_with_nothing_approved_still_finishes_in_the_request(
    calls: Calls, model: ScriptedModel
) -> None:
    with scenario(shop(calls), model=model, inline=False) as h:
        turn_id, _sid, pending = start(h)
        h.engine.resolve(pending["t3"].pending_id, Denial(), BOB)

        assert isinstance(h.invoker, RecordingInvoker)  # inline=False
        assert h.invoker.invoked == []
        assert turn(h, turn_id).stop_reason is StopReason.DENIED
