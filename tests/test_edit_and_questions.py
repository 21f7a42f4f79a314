"""Approve-with-edit, durable questions, mixed batches and chained pauses (seed 000)."""

from __future__ import annotations

from typing import Any

import pytest

from loopengine.app.request.resolution import Decider
from loopengine.authoring.tools import ASK_USER
from loopengine.domain.base.errors import Forbidden, InvalidInput, WrongKind
from loopengine.domain.decisions import Approval, Approve, Denial, Reply
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.harness import Calls, agent
from tests.scenario import assert_protocol, checkpoint, history, results, scenario, turn

REVIEWER = Decider("ops@example.com")
REFUND_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "number", "minimum": 0},
        "reason": {"type": "string"},
    },
    "required": ["order_id", "amount", "reason"],
    "additionalProperties": False,
}
REFUND = {"order_id": "A-1001", "amount": 212.0, "reason": "arrived broken"}
RULES = {
    "rules": [
        {"tool": "issue_refund", "when": {"field": "amount", "op": "gt", "value": 1000}, "decision": "deny"},
        {"tool": "lookup", "decision": "allow"},
    ],
    "default_decision": "ask",
}


def refund_agent(calls: Calls) -> Any:
    return agent("shop", [calls.tool("issue_refund", REFUND_SCHEMA), calls.tool("lookup")], RULES)


def refund_model() -> ScriptedModel:
    return ScriptedModel.from_list([call(use("issue_refund", REFUND, id="r1")), say("refunded")])


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ({"order_id": "A-1001", "amount": "lots", "reason": "x"}, "amount"),
        ({"order_id": "A-1001", "reason": "x"}, "amount"),
        ({**REFUND, "amount": -5}, "amount"),
        ({**REFUND, "extra": True}, "extra"),
        ({**REFUND, "amount": 5000}, "rules deny"),
        (["not", "an", "object"], "JSON object"),
        ("amount=5", "JSON object"),
        (5, "JSON object"),
    ],
)
def test_invalid_edit_then_valid_edit_on_the_same_pending_id(bad: Any, why: str) -> None:
    calls = Calls()
    model = refund_model()
    with scenario(refund_agent(calls), model=model) as h:
        out = h.engine.send_message("shop", "refund A-1001")
        (item,) = out.pending
        before = checkpoint(h, out.turn_id)

        refused = Forbidden if why == "rules deny" else InvalidInput  # a denied edit is 403
        with pytest.raises(refused) as info:
            h.engine.resolve(item.pending_id, Approval(edited_args=bad), REVIEWER)

        assert why in str(info.value)
        after = checkpoint(h, out.turn_id)
        assert after.to_dict() == before.to_dict()
        assert after.version == before.version
        assert calls.count("issue_refund") == 0
        assert turn(h, out.turn_id).status is TurnStatus.PAUSED
        assert len(history(h, out.session_id)) == 2

        edit = {**REFUND, "amount": 150.0, "reason": "partial: one item broken"}
        res = h.engine.resolve(item.pending_id, Approval(edited_args=edit), REVIEWER)

        assert not res.already_resolved and res.completed
        assert calls.log == [("issue_refund", edit)]
        msgs = assert_protocol(h, out.session_id)
        told = results(msgs[2])["r1"]
        assert told["reviewer_edited_args"] == edit
        assert told["result"] == {"tool": "issue_refund", "args": edit}
        assert "212" not in msgs[2].tool_results[0].content  # the model's draft is not what ran
        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN
        cp = h.rt.stores.checkpoints.find_by_pending(item.pending_id)
        assert cp is not None
        (decision,) = cp.decisions
        assert decision.kind == "approve"
        assert isinstance(decision, Approve)
        assert decision.edited_args == edit
        assert decision.decided_by == REVIEWER.identity


def test_approve_without_edit_runs_the_drafted_args() -> None:
    calls = Calls()
    with scenario(refund_agent(calls), model=refund_model()) as h:
        out = h.engine.send_message("shop", "refund A-1001")
        h.engine.resolve(out.pending[0].pending_id, Approval(), REVIEWER)
        assert calls.log == [("issue_refund", REFUND)]
        told = results(assert_protocol(h, out.session_id)[2])["r1"]
        assert told == {"tool": "issue_refund", "args": REFUND}


def test_bad_decision_word_is_invalid_and_changes_nothing() -> None:
    calls = Calls()
    with scenario(refund_agent(calls), model=refund_model()) as h:
        out = h.engine.send_message("shop", "refund A-1001")
        before = checkpoint(h, out.turn_id).to_dict()
        with pytest.raises(InvalidInput):
            h.engine.resolve(out.pending[0].pending_id, "yes please", REVIEWER)  # type: ignore[arg-type]
        assert checkpoint(h, out.turn_id).to_dict() == before


# -- questions ------------------------------------------------------------------------------------


def test_two_step_question_chain() -> None:
    calls = Calls()
    model = ScriptedModel.from_list(
        [
            call(use(ASK_USER, {"question": "Which order?"}, id="q1")),
            call(
                use(ASK_USER, {"question": "Refund or replace?", "options": ["refund", "replace"]}, id="q2")
            ),
            say("Refunding A-1001."),
        ]
    )
    with scenario(refund_agent(calls), model=model) as h:
        out = h.engine.send_message("shop", "my order broke")

        assert out.status is TurnStatus.PAUSED
        assert out.stop_reason is StopReason.PENDING_QUESTION
        (q1,) = out.pending
        assert (q1.kind, q1.tool, q1.tool_use_id) == ("question", ASK_USER, "q1")
        (note,) = h.notifier.events("question")
        assert note["question"] == "Which order?"
        assert note["pendingId"] == q1.pending_id
        assert note["resolveUrl"].endswith(f"/pending-questions/{q1.pending_id}/answer")

        res = h.engine.answer(q1.pending_id, Reply("A-1001"), Decider("customer@example.com", "magic"))

        # the resumed turn asked again: chained
        assert res.completed
        again = h.engine.outcome(out.turn_id)
        assert again.status is TurnStatus.PAUSED
        assert again.stop_reason is StopReason.PENDING_QUESTION
        (q2,) = again.pending
        assert q2.tool_use_id == "q2" and q2.pending_id != q1.pending_id
        assert h.notifier.events("question")[-1]["options"] == ["refund", "replace"]
        assert h.engine.answer(q1.pending_id, Reply("A-1002"), REVIEWER).already_resolved

        h.engine.answer(q2.pending_id, Reply("refund"), REVIEWER)

        done = turn(h, out.turn_id)
        assert done.status is TurnStatus.FINISHED
        assert done.stop_reason is StopReason.END_TURN
        msgs = assert_protocol(h, out.session_id)
        assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant", "user", "assistant"]
        assert results(msgs[2]) == {"q1": "A-1001"}
        assert results(msgs[4]) == {"q2": "refund"}
        assert model.requests[-1].messages[4] == msgs[4]
        assert calls.log == []


def test_answer_must_be_a_non_empty_string() -> None:
    model = ScriptedModel.from_list([call(use(ASK_USER, {"question": "?"}, id="q1")), say("ok")])
    with scenario(refund_agent(Calls()), model=model) as h:
        out = h.engine.send_message("shop", "hm")
        before = checkpoint(h, out.turn_id).to_dict()
        for bad in ("", "   ", None, 5, {"answer": "x"}):
            with pytest.raises(InvalidInput):
                h.engine.answer(out.pending[0].pending_id, Reply(bad), REVIEWER)  # type: ignore[arg-type]
        assert checkpoint(h, out.turn_id).to_dict() == before


def test_mixed_batch_is_pending_approval_and_each_route_rejects_the_other_kind() -> None:
    calls = Calls()
    model = ScriptedModel.from_list(
        [
            call(
                use("lookup", {"x": 1}, id="l1"),
                use("issue_refund", REFUND, id="r1"),
                use(ASK_USER, {"question": "Also email you?"}, id="q1"),
            ),
            say("done"),
        ]
    )
    with scenario(refund_agent(calls), model=model) as h:
        out = h.engine.send_message("shop", "refund")

        assert out.stop_reason is StopReason.PENDING_APPROVAL
        by_kind = {p.kind: p for p in out.pending}
        approval, question = by_kind["approval"], by_kind["question"]
        before = checkpoint(h, out.turn_id).to_dict()

        with pytest.raises(WrongKind) as info:
            h.engine.answer(approval.pending_id, Reply("yes"), REVIEWER)
        assert f"POST /pending-approvals/{approval.pending_id}/resolve" in str(info.value)
        for verdict in (Approval(), Denial()):
            with pytest.raises(WrongKind) as info:
                h.engine.resolve(question.pending_id, verdict, REVIEWER)
            assert f"POST /pending-questions/{question.pending_id}/answer" in str(info.value)
        assert checkpoint(h, out.turn_id).to_dict() == before
        assert calls.count("issue_refund") == 0

        assert h.engine.answer(question.pending_id, Reply("yes"), REVIEWER).outstanding == 1
        assert turn(h, out.turn_id).status is TurnStatus.PAUSED
        h.engine.resolve(approval.pending_id, Approval(), REVIEWER)

        msgs = assert_protocol(h, out.session_id)
        answered = results(msgs[2])
        assert answered["q1"] == "yes"
        assert answered["r1"] == {"tool": "issue_refund", "args": REFUND}
        assert answered["l1"] == {"tool": "lookup", "args": {"x": 1}}
        assert turn(h, out.turn_id).stop_reason is StopReason.END_TURN


def test_denying_the_approval_of_a_mixed_batch_skips_the_question() -> None:
    model = ScriptedModel.from_list(
        [call(use("issue_refund", REFUND, id="r1"), use(ASK_USER, {"question": "?"}, id="q1")), say("x")]
    )
    with scenario(refund_agent(Calls()), model=model) as h:
        out = h.engine.send_message("shop", "refund")
        approval = next(p for p in out.pending if p.kind == "approval")
        question = next(p for p in out.pending if p.kind == "question")

        h.engine.resolve(approval.pending_id, Denial(), REVIEWER)

        answered = results(assert_protocol(h, out.session_id)[2])
        assert answered["r1"]["status"] == "denied"
        assert answered["q1"]["status"] == "skipped"
        assert h.engine.answer(question.pending_id, Reply("too late"), REVIEWER).already_resolved
        assert turn(h, out.turn_id).stop_reason is StopReason.DENIED


# -- chained pauses -------------------------------------------------------------------------------


def test_a_resumed_turn_pauses_again_on_a_new_approval() -> None:
    calls = Calls()
    model = ScriptedModel.from_list(
        [
            call(use("issue_refund", REFUND, id="r1")),
            call(use("lookup", {"x": 7}, id="l2"), use("issue_refund", {**REFUND, "amount": 10.0}, id="r2")),
            say("two refunds"),
        ]
    )
    with scenario(refund_agent(calls), model=model) as h:
        out = h.engine.send_message("shop", "refund twice")
        first_cp = turn(h, out.turn_id).checkpoint_id

        h.engine.resolve(out.pending[0].pending_id, Approval(), REVIEWER)

        again = h.engine.outcome(out.turn_id)
        assert again.status is TurnStatus.PAUSED
        assert again.stop_reason is StopReason.PENDING_APPROVAL
        (item,) = again.pending
        assert item.tool_use_id == "r2" and item.args["amount"] == 10.0
        stored = turn(h, out.turn_id)
        assert stored.checkpoint_id not in (None, first_cp)
        cp = checkpoint(h, out.turn_id)
        assert [r.tool_use_id for r in cp.results_so_far] == ["l2"]
        assert calls.count("lookup") == 1 and calls.count("issue_refund") == 1
        msgs = assert_protocol(h, out.session_id)
        assert len(msgs) == 4 and [u.id for u in msgs[-1].tool_uses] == ["l2", "r2"]
        assert len(h.notifier.events("approval")) == 2
        assert h.notifier.events("run_finish") == []  # pauses are not finishes

        h.engine.resolve(item.pending_id, Approval(), REVIEWER)

        assert calls.count("issue_refund") == 2
        msgs = assert_protocol(h, out.session_id)
        assert [r.tool_use_id for r in msgs[4].tool_results] == ["l2", "r2"]
        done = turn(h, out.turn_id)
        assert (done.status, done.stop_reason, done.text) == (
            TurnStatus.FINISHED,
            StopReason.END_TURN,
            "two refunds",
        )
        (fin,) = h.notifier.events("run_finish")
        assert fin["text"] == "two refunds" and fin["stopReason"] == "end_turn"
        assert [e["trigger"] for e in h.notifier.events("run_start")] == ["message", "resume", "resume"]


def test_argshash_mismatch_decides_nothing() -> None:
    from loopengine.domain.base.errors import Conflict

    calls = Calls()
    with scenario(refund_agent(calls), model=refund_model()) as h:
        out = h.engine.send_message("shop", "refund")
        (item,) = out.pending
        before = checkpoint(h, out.turn_id).to_dict()
        with pytest.raises(Conflict):
            h.engine.resolve(item.pending_id, Approval(args_hash="sha256:" + "0" * 32), REVIEWER)
        assert checkpoint(h, out.turn_id).to_dict() == before
        assert calls.count("issue_refund") == 0
        h.engine.resolve(item.pending_id, Approval(args_hash=item.args_hash), REVIEWER)
        assert calls.count("issue_refund") == 1
