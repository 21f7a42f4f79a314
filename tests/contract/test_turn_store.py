"""TurnStore contract: turns with compare-and-set, audit events, call claims, config snapshots."""

from __future__ import annotations

import dataclasses

import pytest

from loopengine.app.ports import Stores
from loopengine.domain.base.errors import AlreadyExists, VersionConflict
from loopengine.domain.base.ids import new_id
from loopengine.domain.turns import StopReason, TurnStatus
from tests.contract import T0, call, turn


def test_create_then_get_round_trips_every_field(stores: Stores) -> None:
    record = turn(
        created_at=T0 + 0.25,
        trigger="schedule",
        status=TurnStatus.PAUSED,
        stop_reason=StopReason.PENDING_APPROVAL,
        text="Waiting for approval — ✓",
        checkpoint_id=new_id("cp_"),
        verdicts={"toolu_1": {"decision": "ask", "rule": 2}, "toolu_2": {"decision": "allow"}},
        lease_until=T0 + 60,
        code_version="abc123",
        updated_at=T0 + 1,
    )

    stores.turns.create_turn(record)

    assert stores.turns.get_turn(record.turn_id) == record


def test_an_unknown_turn_reads_as_none(stores: Stores) -> None:
    assert stores.turns.get_turn(new_id("turn_")) is None


def test_creating_a_turn_twice_is_already_exists(stores: Stores) -> None:
    record = turn()
    stores.turns.create_turn(record)

    with pytest.raises(AlreadyExists):
        stores.turns.create_turn(dataclasses.replace(record, text="second"))

    assert stores.turns.get_turn(record.turn_id) == record


def test_replace_turn_bumps_the_version(stores: Stores) -> None:
    record = turn()
    stores.turns.create_turn(record)

    finished = dataclasses.replace(
        record, status=TurnStatus.FINISHED, stop_reason=StopReason.END_TURN, text="done"
    )
    stored = stores.turns.replace_turn(finished)

    assert stored == dataclasses.replace(finished, version=record.version + 1)
    assert stores.turns.get_turn(record.turn_id) == stored


def test_a_stale_replace_turn_conflicts_and_carries_the_current_record(stores: Stores) -> None:
    record = turn()
    stores.turns.create_turn(record)
    winner = stores.turns.replace_turn(dataclasses.replace(record, lease_until=T0 + 30))

    with pytest.raises(VersionConflict) as lost:
        stores.turns.replace_turn(dataclasses.replace(record, lease_until=T0 + 60))

    assert lost.value.current == winner
    assert stores.turns.get_turn(record.turn_id) == winner


def test_replacing_a_turn_that_does_not_exist_conflicts_with_none(stores: Stores) -> None:
    with pytest.raises(VersionConflict) as missing:
        stores.turns.replace_turn(turn())

    assert missing.value.current is None


def test_session_turns_are_oldest_first_and_per_session(stores: Stores) -> None:
    session = new_id("s_")
    later = turn(session, created_at=T0 + 20)
    earlier = turn(session, created_at=T0 + 10)
    elsewhere = turn(created_at=T0 + 15)
    for record in (later, elsewhere, earlier):
        stores.turns.create_turn(record)

    assert stores.turns.session_turns(later.session_key) == [earlier, later]  # listed by the session's key
    assert stores.turns.session_turns(new_id("s_")) == []


def test_events_come_back_in_the_order_they_were_added(stores: Stores) -> None:
    one, two = new_id("turn_"), new_id("turn_")
    added = [
        {"type": "turn_started", "at": T0, "trigger": "message"},
        {"type": "decision", "at": T0 + 1, "by": {"user": "ops@example.com"}, "args": [1, None]},
        {"type": "tool_finished", "at": T0 + 2, "outcome": "ok", "note": "ünïcode ✓"},
    ]
    for event in added:
        stores.turns.add_event(one, event)
        stores.turns.add_event(two, {"type": "noise", "at": event["at"]})

    assert stores.turns.events(one) == added
    assert len(stores.turns.events(two)) == 3
    assert stores.turns.events(new_id("turn_")) == []


def test_a_call_can_be_started_only_once(stores: Stores) -> None:
    first = call(new_id("turn_"))
    again = dataclasses.replace(first, started_at=T0 + 5, tool="other")

    assert stores.turns.start_call(first) is True
    assert stores.turns.start_call(again) is False
    assert stores.turns.calls(first.turn_id) == {first.tool_use_id: first}


def test_finish_call_records_the_outcome_and_keeps_the_start(stores: Stores) -> None:
    started = call(new_id("turn_"))
    stores.turns.start_call(started)
    result = {"type": "tool_result", "tool_use_id": started.tool_use_id, "content": '{"ok": 1}'}

    stores.turns.finish_call(
        dataclasses.replace(started, started_at=0.0, outcome="ok", result=result, finished_at=T0 + 3)
    )

    expected = dataclasses.replace(started, outcome="ok", result=result, finished_at=T0 + 3)
    assert stores.turns.calls(started.turn_id) == {started.tool_use_id: expected}
    assert stores.turns.start_call(started) is False


def test_finish_call_without_a_start_is_still_recorded(stores: Stores) -> None:
    finished = dataclasses.replace(call(new_id("turn_")), outcome="error", finished_at=T0 + 1)

    stores.turns.finish_call(finished)

    assert stores.turns.calls(finished.turn_id) == {finished.tool_use_id: finished}
    assert stores.turns.start_call(finished) is False


def test_calls_are_keyed_by_tool_use_id_per_turn(stores: Stores) -> None:
    turn_id = new_id("turn_")
    records = [call(turn_id, f"toolu_{n}") for n in range(3)]
    for record in records:
        stores.turns.start_call(record)
    stores.turns.start_call(call(new_id("turn_"), "toolu_0"))

    assert stores.turns.calls(turn_id) == {r.tool_use_id: r for r in records}
    assert stores.turns.calls(new_id("turn_")) == {}


def test_config_snapshots_are_write_once(stores: Stores) -> None:
    snapshot = {
        "system": "You are a helpful agent. — ✓",
        "model": "claude",
        "tools": [{"name": "lookup_order", "input_schema": {"type": "object"}}],
        "rules": {"rules": [], "default_decision": "ask"},
    }

    stores.turns.put_config("h1", snapshot)
    stores.turns.put_config("h1", snapshot)
    stores.turns.put_config("h1", {"system": "changed"})

    assert stores.turns.get_config("h1") == snapshot
    assert stores.turns.get_config("h2") is None


def test_due_turns_lists_turns_due_by_now_earliest_first(stores: Stores) -> None:
    later = turn(due_at=T0 - 10)
    earlier = turn(due_at=T0 - 60)
    live = turn(due_at=T0 + 60)
    paused = turn(status=TurnStatus.PAUSED, due_at=None)
    finished = turn(status=TurnStatus.FINISHED, stop_reason=StopReason.END_TURN, due_at=None)
    for record in (later, live, paused, earlier, finished):
        stores.turns.create_turn(record)

    assert stores.turns.due_turns(T0) == [earlier, later]
    assert stores.turns.due_turns(T0, limit=1) == [earlier]
    assert stores.turns.due_turns(T0 - 61) == []
    assert stores.turns.due_turns(T0 - 60) == [earlier]  # due at now is due
    assert stores.turns.due_turns(T0 + 61) == [earlier, later, live]


def test_a_moved_due_time_reorders_and_a_turn_with_nothing_due_drops_out(stores: Stores) -> None:
    first = turn(due_at=T0 - 60)
    second = turn(due_at=T0 - 30)
    for record in (first, second):
        stores.turns.create_turn(record)

    renewed = stores.turns.replace_turn(dataclasses.replace(first, due_at=T0 + 900))
    assert stores.turns.due_turns(T0) == [second]
    assert stores.turns.due_turns(T0 + 901) == [second, renewed]

    parked = stores.turns.replace_turn(dataclasses.replace(second, status=TurnStatus.PAUSED, due_at=None))
    assert stores.turns.due_turns(T0 + 901) == [renewed]
    expiring = stores.turns.replace_turn(dataclasses.replace(parked, due_at=T0 + 100))
    assert stores.turns.due_turns(T0 + 901) == [expiring, renewed]

    done = dataclasses.replace(
        renewed, status=TurnStatus.FINISHED, stop_reason=StopReason.END_TURN, due_at=None
    )
    stores.turns.replace_turn(done)
    assert stores.turns.due_turns(T0 + 901) == [expiring]
