"""The Decision union and item_fate(): one typed record per decision, one answer to "what became of it"."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopengine.app import api_models as m
from loopengine.domain import checkpoint as cps
from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint
from loopengine.domain.decisions import (
    KINDS,
    Abandoned,
    Answer,
    Approval,
    Approve,
    DecidedBy,
    Denial,
    Deny,
    Expired,
    Reply,
    Skipped,
    decision_from_dict,
)
from loopengine.domain.fate import FateState, item_fate
from loopengine.domain.turns import StopReason

T0 = 1_800_000_000.0
ALICE = DecidedBy("alice", "api")

text = st.text(max_size=20)
common = {
    "pending_id": st.from_regex(r"pnd_[0-9a-f]{8}", fullmatch=True),
    "tool": text,
    "at": st.floats(min_value=0, max_value=4e9),
    "decided_by": text,
    "channel": st.none() | text,
}
decisions = st.one_of(
    st.builds(
        Approve,
        **common,
        edited_args=st.none() | st.dictionaries(text, st.integers()),
        comment=st.none() | text,
    ),
    st.builds(Deny, **common, comment=st.none() | text),
    st.builds(Answer, **common, answer=text),
    st.builds(Expired, **common, on_expiry=st.sampled_from(["unknown", "deny"])),
    st.builds(Abandoned, **common, why=st.none() | text),
    st.builds(Skipped, **common),
)


@given(decisions)
def test_every_decision_survives_its_stored_form(decision: object) -> None:
    assert decision_from_dict(decision.to_dict()) == decision  # type: ignore[attr-defined]


def test_the_union_has_the_six_kinds_of_the_design() -> None:
    assert set(KINDS) == {"approve", "deny", "answer", "expired", "abandoned", "skipped"}


def test_records_stored_before_the_types_still_parse() -> None:
    old = {
        "pendingId": "pnd_1",
        "tool": "issue_refund",
        "decision": "skipped",
        "at": T0,
        "decidedBy": "cascade",
    }
    assert decision_from_dict(old) == Skipped(pending_id="pnd_1", tool="issue_refund", at=T0)
    edited = {
        "pendingId": "pnd_2",
        "tool": "t",
        "decision": "approve",
        "at": T0,
        "decidedBy": "bob",
        "channel": "slack",
        "editedArgs": {"amount": 1},
    }
    parsed = decision_from_dict(edited)
    assert isinstance(parsed, Approve) and parsed.edited_args == {"amount": 1} and parsed.channel == "slack"


def test_an_unknown_kind_is_refused_not_guessed() -> None:
    with pytest.raises(ValueError, match="unknown decision"):
        decision_from_dict({"pendingId": "pnd_1", "decision": "approved", "at": T0, "decidedBy": "x"})


def _item(pid: str, expires_at: float | None = None, on_expiry: str = "unknown") -> PendingItem:
    return PendingItem(
        pid, f"tu_{pid}", "issue_refund", {}, "ask", "approval", "h", (), expires_at, on_expiry
    )


def _cp(*items: PendingItem) -> TurnCheckpoint:
    return TurnCheckpoint("cp_1", "trn_1", "ses_1", "a", "", (), {i.pending_id: i for i in items}, T0)


def test_fate_of_every_path_an_item_can_take() -> None:
    a, b = _item("pnd_a"), _item("pnd_b", expires_at=T0 + 60)
    cp = _cp(a, b)
    assert item_fate(None, None, "pnd_a", T0).state is FateState.GONE
    assert item_fate(cp, None, "pnd_a", T0).state is FateState.OPEN
    assert item_fate(cp, None, "pnd_b", T0 + 61).state is FateState.EXPIRED  # due, not yet recorded
    assert item_fate(cp, None, "pnd_zzz", T0).state is FateState.GONE

    approved = cps.approve(cp, a, {}, ALICE, T0 + 1, edited=False)
    fate = item_fate(approved, None, "pnd_a", T0 + 2)
    assert fate.state is FateState.APPROVED and fate.by_a_person and fate.decision is not None
    assert fate.decision.decided_by == "alice"

    denied = cps.deny(cp, b, "no", ALICE, T0 + 1)
    assert item_fate(denied, None, "pnd_b", T0).state is FateState.DENIED
    assert item_fate(denied, None, "pnd_a", T0).state is FateState.SKIPPED

    expired = cps.expire(_cp(_item("pnd_c", T0, "deny")), _item("pnd_c", T0, "deny"), T0, "1m")
    fate = item_fate(expired, None, "pnd_c", T0)
    assert fate.state is FateState.EXPIRED and fate.denied_by_policy

    abandoned = cps.abandon(cp, "moved on", ALICE, T0)
    assert item_fate(abandoned, StopReason.SUPERSEDED, "pnd_a", T0).state is FateState.SUPERSEDED
    assert item_fate(abandoned, StopReason.CANCELLED, "pnd_a", T0).state is FateState.CANCELLED
    assert item_fate(abandoned, None, "pnd_a", T0).state is FateState.ABANDONED


# -- what a person sends --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: Approval(scope="forever"),  # type: ignore[arg-type]
        lambda: Approval(comment=5),  # type: ignore[arg-type]
        lambda: Approval(args_hash=["x"]),  # type: ignore[arg-type]
        lambda: Denial(comment=b"no"),  # type: ignore[arg-type]
        lambda: Denial(args_hash=1),  # type: ignore[arg-type]
        lambda: Reply(" \n"),
        lambda: Reply(None),  # type: ignore[arg-type]
    ],
)
def test_a_verdict_checks_its_fields_when_built(build: object) -> None:
    with pytest.raises(InvalidInput):
        build()  # type: ignore[operator]


def test_a_resolve_body_parses_into_the_verdict_it_asks_for() -> None:
    edit = {"decision": "approve", "editedArgs": {"a": 1}, "comment": "ok", "argsHash": "h", "scope": "turn"}
    assert m.ResolveRequest.model_validate(edit).verdict() == Approval(
        edited_args={"a": 1}, comment="ok", args_hash="h", scope="turn"
    )
    deny = {"decision": "deny", "comment": "no", "argsHash": "h", "editedArgs": {"a": 1}, "scope": "turn"}
    assert m.ResolveRequest.model_validate(deny).verdict() == Denial(comment="no", args_hash="h")
    assert m.AnswerRequest.model_validate({"answer": "A-1001"}).reply() == Reply("A-1001")
