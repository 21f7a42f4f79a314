"""The atomic state-change write (``TurnStore.commit``) and the outbox, on every store."""

from __future__ import annotations

import dataclasses

import pytest

from loopengine.app.ports import Append, Change, Stores
from loopengine.domain import outbox
from loopengine.domain.base.errors import AlreadyExists, VersionConflict
from loopengine.domain.messages import Message
from loopengine.domain.turns import TurnStatus
from tests.contract import T0, checkpoint, turn


def _note(turn_id: str, event_id: str, due: float) -> outbox.OutboxRecord:
    record = outbox.new_record(event_id, turn_id, "customer-service", "h1", "approval", {"x": 1}, due - 30)
    return dataclasses.replace(record, due_at=due)


def test_a_pause_lands_whole_turn_checkpoint_events_and_outbox(stores: Stores) -> None:
    running = turn()
    stores.turns.create_turn(running)
    cp = checkpoint(turn_id=running.turn_id)
    paused = dataclasses.replace(running, status=TurnStatus.PAUSED, checkpoint_id=cp.id, due_at=None)
    event = {"type": "paused", "at": T0}
    note = _note(running.turn_id, "evt_1", T0 + 30)

    done = stores.turns.commit(
        Change(running.turn_id, turn=paused, new_checkpoint=cp, events=(event,), outbox=(note,))
    )

    assert done.turn == dataclasses.replace(paused, version=running.version + 1)
    assert stores.turns.get_turn(running.turn_id) == done.turn
    assert stores.checkpoints.get(cp.id) == cp
    assert stores.checkpoints.find_by_pending(next(iter(cp.outstanding))) == cp
    assert stores.turns.events(running.turn_id) == [event]
    assert stores.turns.due_outbox(T0 + 30) == [note]
    assert stores.turns.due_outbox(T0 + 29) == []


def test_a_lost_turn_race_writes_nothing_and_carries_the_stored_turn(stores: Stores) -> None:
    running = turn()
    stores.turns.create_turn(running)
    moved = stores.turns.replace_turn(dataclasses.replace(running, lease_until=T0 + 5))
    cp = checkpoint(turn_id=running.turn_id)
    stale = dataclasses.replace(running, status=TurnStatus.PAUSED, checkpoint_id=cp.id)

    with pytest.raises(VersionConflict) as lost:
        stores.turns.commit(
            Change(
                running.turn_id,
                turn=stale,
                new_checkpoint=cp,
                events=({"type": "paused", "at": T0},),
                outbox=(_note(running.turn_id, "evt_2", T0),),
            )
        )

    assert lost.value.current == moved
    assert stores.checkpoints.get(cp.id) is None
    assert stores.checkpoints.find_by_pending(next(iter(cp.outstanding))) is None
    assert stores.turns.events(running.turn_id) == []
    assert stores.turns.due_outbox(T0 + 3600) == []


def test_a_lost_checkpoint_race_carries_the_stored_checkpoint(stores: Stores) -> None:
    running = turn()
    stores.turns.create_turn(running)
    cp = checkpoint(turn_id=running.turn_id)
    stores.checkpoints.create(cp)
    winner = stores.checkpoints.replace(dataclasses.replace(cp, closed=True))

    with pytest.raises(VersionConflict) as lost:
        stores.turns.commit(
            Change(running.turn_id, turn=running, checkpoint=dataclasses.replace(cp, denied=True))
        )

    assert lost.value.current == winner
    assert stores.turns.get_turn(running.turn_id) == running  # the turn half did not land either


def test_a_new_turn_and_its_message_land_together_or_not_at_all(stores: Stores) -> None:
    first = turn(session_id="ses_1")
    message = Message.user_text("hello")
    stores.turns.commit(Change(first.turn_id, new_turn=first, append=Append("ses_1", (message,), 0)))
    assert stores.sessions.load("ses_1") == [message]

    second = turn(session_id="ses_1")
    with pytest.raises(VersionConflict) as lost:
        stores.turns.commit(
            Change(second.turn_id, new_turn=second, append=Append("ses_1", (Message.user_text("again"),), 0))
        )
    assert lost.value.current == 1
    assert stores.turns.get_turn(second.turn_id) is None
    assert stores.sessions.load("ses_1") == [message]

    with pytest.raises(AlreadyExists):
        stores.turns.commit(Change(first.turn_id, new_turn=first))


def test_outbox_records_move_through_their_states(stores: Stores) -> None:
    note = _note("trn_x", "evt_3", T0)
    stores.turns.put_outbox(note)
    assert stores.turns.due_outbox(T0) == [note]

    failed = outbox.attempt_failed(note, T0, "connection refused")
    stores.turns.put_outbox(failed)
    assert failed.due_at is not None and failed.due_at > T0
    assert stores.turns.due_outbox(T0) == []
    assert stores.turns.due_outbox(failed.due_at) == [failed]

    stores.turns.put_outbox(outbox.delivered(failed))
    assert stores.turns.due_outbox(T0 + 10**6) == []
