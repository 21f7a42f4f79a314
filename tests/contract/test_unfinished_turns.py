"""TurnStore contract: a session's unfinished turns, whatever finished before them."""

from __future__ import annotations

import dataclasses

from loopengine.app.ports import Change, Stores
from loopengine.domain.base.ids import new_id
from loopengine.domain.turns import StopReason, TurnStatus
from tests.contract import T0, turn


def test_unfinished_turns_are_oldest_first_and_per_session(stores: Stores) -> None:
    session = new_id("s_")
    later = turn(session, created_at=T0 + 20, status=TurnStatus.QUEUED)
    earlier = turn(session, created_at=T0 + 10, status=TurnStatus.PAUSED)
    elsewhere = turn(created_at=T0 + 15)
    done = turn(session, created_at=T0 + 5, status=TurnStatus.FINISHED, stop_reason=StopReason.END_TURN)
    for record in (later, elsewhere, earlier, done):
        stores.turns.create_turn(record)

    assert stores.turns.unfinished_session_turns(later.session_key) == [earlier, later]
    assert stores.turns.unfinished_session_turns(new_id("s_")) == []


def test_a_committed_finish_leaves_the_unfinished_turns(stores: Stores) -> None:
    session = new_id("s_")
    running, queued = turn(session, created_at=T0), turn(session, created_at=T0 + 1, status=TurnStatus.QUEUED)
    for record in (running, queued):
        stores.turns.create_turn(record)
    finished = dataclasses.replace(running, status=TurnStatus.FINISHED, stop_reason=StopReason.END_TURN)

    stores.turns.commit(Change(running.turn_id, turn=finished))

    assert stores.turns.unfinished_session_turns(queued.session_key) == [queued]
    started = dataclasses.replace(queued, status=TurnStatus.RUNNING)
    stored = stores.turns.commit(Change(queued.turn_id, turn=started)).turn
    assert stores.turns.unfinished_session_turns(queued.session_key) == [stored]


def test_a_replaced_finish_leaves_the_unfinished_turns(stores: Stores) -> None:
    record = turn()
    stores.turns.create_turn(record)
    stores.turns.replace_turn(dataclasses.replace(record, status=TurnStatus.FINISHED))

    assert stores.turns.unfinished_session_turns(record.session_key) == []
    assert [t.turn_id for t in stores.turns.session_turns(record.session_key)] == [record.turn_id]
