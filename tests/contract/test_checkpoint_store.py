"""CheckpointStore contract: create, pointers, compare-and-set, the open list."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopengine.app.ports import Stores
from loopengine.domain import checkpoint as transitions
from loopengine.domain.base.errors import AlreadyExists, VersionConflict
from loopengine.domain.base.ids import new_id
from loopengine.domain.checkpoint import PendingItem
from loopengine.domain.decisions import Approve, DecidedBy
from loopengine.domain.messages import ToolResultBlock
from tests.contract import T0, checkpoint, item

WHO = DecidedBy("ops@example.com", "http")


def test_create_then_get_round_trips_every_field(stores: Stores) -> None:
    running = item(kind="approval", order_id="A-1001", amount=10.5, reason="ünïcode ✓")
    cp = checkpoint(
        item(kind="approval"),
        item(kind="question", question="which address?", options=["home", "work"]),
        created_at=T0 + 0.123456,
        approved={running.pending_id: running},
        decisions=(
            Approve(pending_id=running.pending_id, tool=running.tool, at=T0, decided_by=WHO.identity),
        ),
        results_so_far=(
            ToolResultBlock("toolu_a", '{"ok": true}'),
            ToolResultBlock("toolu_b", "boom", is_error=True),
        ),
    )

    stores.checkpoints.create(cp)

    assert stores.checkpoints.get(cp.id) == cp


def test_find_by_pending_follows_every_pointer(stores: Stores) -> None:
    cp = checkpoint(item(), item(), item(kind="question"))
    stores.checkpoints.create(cp)

    for pending_id in cp.outstanding:
        assert stores.checkpoints.find_by_pending(pending_id) == cp


def test_unknown_ids_read_as_none(stores: Stores) -> None:
    stores.checkpoints.create(checkpoint())

    assert stores.checkpoints.get(new_id("cp_")) is None
    assert stores.checkpoints.find_by_pending(new_id("p_")) is None


def test_find_by_pending_still_answers_once_the_checkpoint_is_closed(stores: Stores) -> None:
    first, second = item(), item()
    cp = checkpoint(first, second)
    stores.checkpoints.create(cp)

    closed = stores.checkpoints.replace(transitions.deny(cp, first, "no", WHO, T0 + 5))

    assert closed.closed
    assert stores.checkpoints.find_by_pending(first.pending_id) == closed
    assert stores.checkpoints.find_by_pending(second.pending_id) == closed


def test_create_twice_is_already_exists_and_keeps_the_original(stores: Stores) -> None:
    cp = checkpoint()
    stores.checkpoints.create(cp)

    with pytest.raises(AlreadyExists):
        stores.checkpoints.create(dataclasses.replace(cp, agent="other", outstanding={}))

    assert stores.checkpoints.get(cp.id) == cp


def test_a_colliding_pending_id_fails_the_whole_create(stores: Stores) -> None:
    shared = item()
    stores.checkpoints.create(checkpoint(shared))
    fresh = item()
    second = checkpoint(fresh, shared)

    with pytest.raises(AlreadyExists):
        stores.checkpoints.create(second)

    assert stores.checkpoints.get(second.id) is None
    assert stores.checkpoints.find_by_pending(fresh.pending_id) is None


def test_replace_bumps_the_version_and_returns_what_it_stored(stores: Stores) -> None:
    pending = item()
    cp = checkpoint(pending, item())
    stores.checkpoints.create(cp)

    changed = transitions.approve(cp, pending, pending.args, WHO, T0 + 1, edited=False)
    stored = stores.checkpoints.replace(changed)

    assert stored == dataclasses.replace(changed, version=cp.version + 1)
    assert stores.checkpoints.get(cp.id) == stored
    assert stores.checkpoints.replace(stored).version == cp.version + 2


def test_a_stale_replace_conflicts_and_carries_the_current_record(stores: Stores) -> None:
    first, second = item(), item()
    cp = checkpoint(first, second)
    stores.checkpoints.create(cp)
    winner = stores.checkpoints.replace(transitions.deny(cp, first, None, WHO, T0 + 1))
    late = transitions.approve(cp, second, second.args, WHO, T0 + 2, edited=False)

    with pytest.raises(VersionConflict) as lost:
        stores.checkpoints.replace(late)

    assert lost.value.current == winner
    assert stores.checkpoints.get(cp.id) == winner


def test_replacing_a_checkpoint_that_does_not_exist_conflicts_with_none(stores: Stores) -> None:
    with pytest.raises(VersionConflict) as missing:
        stores.checkpoints.replace(checkpoint())

    assert missing.value.current is None


def test_list_open_is_one_tenants_oldest_first_and_filters_by_agent(stores: Stores) -> None:
    late = checkpoint(agent="customer-service", tenant="acme", created_at=T0 + 30)
    early = checkpoint(agent="customer-service", tenant="globex", created_at=T0 + 10)
    other = checkpoint(agent="billing", tenant="acme", created_at=T0 + 20)
    default = checkpoint(agent="billing", tenant="", created_at=T0)
    for cp in (late, early, other, default):
        stores.checkpoints.create(cp)

    assert stores.checkpoints.list_open("acme") == [other, late]
    assert stores.checkpoints.list_open("globex") == [early]
    assert stores.checkpoints.list_open("") == [default]
    assert stores.checkpoints.list_open("acme", agent="customer-service") == [late]
    assert stores.checkpoints.list_open("acme", agent="nobody") == []
    assert stores.checkpoints.list_open("acm") == []  # no prefix match: a tenant is exact


def test_closed_checkpoints_drop_out_of_the_open_list(stores: Stores) -> None:
    question = item(kind="question")
    answered = checkpoint(question, created_at=T0 + 1)
    denied_item = item()
    denied = checkpoint(denied_item, item(), created_at=T0 + 2)
    still_open = checkpoint(created_at=T0 + 3)
    for cp in (answered, denied, still_open):
        stores.checkpoints.create(cp)

    stores.checkpoints.replace(transitions.answer(answered, question, "home", WHO, T0 + 4))
    stores.checkpoints.replace(transitions.deny(denied, denied_item, None, WHO, T0 + 5))

    assert stores.checkpoints.list_open("acme") == [still_open]


_text = st.text(st.characters(codec="utf-8"), max_size=20)
_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(-1e15, 1e15, allow_nan=False, allow_subnormal=False)
    | _text
)
_json = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_items = st.builds(
    PendingItem,
    pending_id=st.just(""),  # replaced by a unique id below
    tool_use_id=_text,
    tool=_text,
    args=st.dictionaries(_text, _json, max_size=4),
    reason=_text,
    kind=st.sampled_from(["approval", "question"]),
    args_hash=_text,
    approvers=st.lists(_text, max_size=2).map(tuple),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(items=st.lists(_items, min_size=1, max_size=4), created_at=st.floats(0, 4e9))
def test_generated_checkpoints_round_trip_through_the_store(
    stores: Stores, items: list[PendingItem], created_at: float
) -> None:
    unique = [dataclasses.replace(i, pending_id=new_id("p_")) for i in items]
    cp = checkpoint(*unique, created_at=created_at)

    stores.checkpoints.create(cp)

    stored = stores.checkpoints.get(cp.id)
    assert stored == cp
    assert stored is not None
    assert stored.to_dict() == cp.to_dict()
    found: dict[str, Any] = {p: stores.checkpoints.find_by_pending(p) for p in cp.outstanding}
    assert found == {p: cp for p in cp.outstanding}
