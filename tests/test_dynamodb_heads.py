"""A turn's head item carries the log of its latest transitions and its claim guard (DynamoDB only).

What ``stores/dynamodb_heads.py`` promises, tried against moto: a transition writes one item of
the turn's partition; a call is claimed at most once whichever way it is claimed, from whichever
process; a log past a KB moves to a ``LOG#`` item and reads the same; events written on their own
interleave by time even at one stamp.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from loopengine.app.ports import Append, Change, Stores
from loopengine.domain.base.errors import AlreadyExists
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.messages import Message
from loopengine.domain.turns import CallRecord, TurnRecord
from loopengine.stores.dynamodb import open_dynamodb_stores
from tests.contract import T0, call, turn
from tests.test_dynamodb_specific import TABLE, Dynamo, dynamo, item_size

__all__ = ["dynamo"]  # the fixture, shared
WRITE_UNIT = 1024
"""Bytes DynamoDB bills as one write unit: a head past it costs two a write."""


def event(kind: str, at: float = T0, **fields: Any) -> JsonDict:
    return {"type": kind, "at": at, **fields}


def started(d: Dynamo, record: TurnRecord | None = None) -> TurnRecord:
    """A turn created the way a message creates one: with its first event."""
    record = record or turn()
    stored = d.stores.turns.commit(Change(record.turn_id, new_turn=record, events=(event("started"),))).turn
    assert stored is not None
    return record


def step(stores: Stores, record: TurnRecord, *events: JsonDict, **change: Any) -> TurnRecord:
    """One transition of ``record`` (lease moved on) with ``events``; the turn as stored."""
    moved = dataclasses.replace(record, lease_until=record.lease_until + 1)
    stored = stores.turns.commit(Change(record.turn_id, turn=moved, events=events, **change)).turn
    assert stored is not None
    return stored


def other_process(d: Dynamo) -> Stores:
    """Stores on the same table that have read nothing yet (another Lambda, another worker)."""
    return open_dynamodb_stores(TABLE, d.clock, client=d.client)


def partition(d: Dynamo, record: TurnRecord) -> list[str]:
    return sorted(i["sk"]["S"] for i in d.scan() if i["pk"]["S"] == f"TURN#{record.turn_id}")


def test_a_transition_with_events_and_a_claim_is_one_put_of_the_head(dynamo: Dynamo) -> None:
    record = started(dynamo)
    claim = call(record.turn_id)
    dynamo.requests.clear()

    step(dynamo.stores, record, event("model_response"), claims=(claim,))

    assert dynamo.requests == {"PutItem": 1}  # no transaction, no event item, no call item
    assert partition(dynamo, record) == ["TURN"]
    assert [e["type"] for e in dynamo.stores.turns.events(record.turn_id)] == ["started", "model_response"]
    assert dynamo.stores.turns.calls(record.turn_id) == {claim.tool_use_id: claim}


def test_a_claim_in_a_transition_then_on_its_own_is_refused(dynamo: Dynamo) -> None:
    record = started(dynamo)
    claim = call(record.turn_id)
    step(dynamo.stores, record, claims=(claim,))

    assert not dynamo.stores.turns.start_call(claim)
    assert not other_process(dynamo).turns.start_call(claim)


@pytest.mark.parametrize("where", ["this process", "another process"])
def test_a_claim_on_its_own_then_in_a_transition_is_refused_and_writes_nothing(
    dynamo: Dynamo, where: str
) -> None:
    record = started(dynamo)
    claim = call(record.turn_id)
    claimer = dynamo.stores if where == "this process" else other_process(dynamo)
    assert claimer.turns.start_call(claim)
    before = dynamo.scan()

    with pytest.raises(AlreadyExists):
        step(dynamo.stores, record, event("model_response"), claims=(claim,))

    assert dynamo.scan() == before
    assert dynamo.stores.turns.calls(record.turn_id) == {claim.tool_use_id: claim}


@pytest.mark.parametrize("earlier", [0, 1])
@pytest.mark.parametrize("write", ["PutItem", "TransactWriteItems"])
def test_a_claim_of_another_call_meanwhile_is_kept_and_the_transition_lands(
    dynamo: Dynamo, earlier: int, write: str
) -> None:
    """The head's put rewrites ``claimed``: a claim added since this process read it must survive.

    The transition is the head alone (a PutItem) or the head and a message (a transaction).
    """
    record = started(dynamo)
    for i in range(earlier):  # the set this process holds is empty, or not
        record = step(dynamo.stores, record, claims=(call(record.turn_id, f"toolu_earlier_{i}"),))
    mine, theirs = call(record.turn_id, "toolu_mine"), call(record.turn_id, "toolu_theirs")
    assert other_process(dynamo).turns.start_call(theirs)
    message = Append(record.session_id, (Message.user_text("hi"),), 0) if write != "PutItem" else None
    dynamo.requests.clear()

    stored = step(dynamo.stores, record, event("model_response"), claims=(mine,), append=message)

    assert dynamo.requests[write] == 2  # refused once (the set grew), planned again, landed

    assert stored.version == record.version + 1
    assert {"toolu_mine", "toolu_theirs"} <= set(dynamo.stores.turns.calls(record.turn_id))
    for again in (mine, theirs):
        assert not other_process(dynamo).turns.start_call(again)
    with pytest.raises(AlreadyExists):
        step(dynamo.stores, stored, claims=(theirs,))


def test_a_log_past_a_kb_moves_to_a_log_item_and_reads_the_same(dynamo: Dynamo) -> None:
    record = started(dynamo)
    rng = random.Random(7)
    sent: list[JsonDict] = [event("started")]
    calls: dict[str, CallRecord] = {}
    for i in range(24):
        note = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=120))  # no dictionary helps
        happened = event("tool_outcome", T0 + i, note=note)
        claim = call(record.turn_id, f"toolu_{i}", T0 + i)
        done = dataclasses.replace(claim, outcome="ok", result={"note": note}, finished_at=T0 + i)
        record = step(dynamo.stores, record, happened, claims=(claim,), calls=(done,))
        sent.append(happened)
        calls[claim.tool_use_id] = done

    logs = [sk for sk in partition(dynamo, record) if sk.startswith("LOG#")]
    assert len(logs) >= 2, logs  # it did flush, more than once
    head = dynamo.raw(f"TURN#{record.turn_id}", "TURN")
    assert head is not None and item_size(head) <= WRITE_UNIT
    for reader in (dynamo.stores, other_process(dynamo)):
        assert reader.turns.events(record.turn_id) == sent
        assert reader.turns.calls(record.turn_id) == calls


@pytest.mark.parametrize("flushes", [False, True])
def test_events_written_on_their_own_interleave_by_time_even_at_one_stamp(
    dynamo: Dynamo, flushes: bool
) -> None:
    """The clock stands still: the order they were written in is the order they read in."""
    record = started(dynamo)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    padding: dict[str, Any] = {"pad": "".join(random.Random(3).choices(letters, k=2000))} if flushes else {}
    record = step(dynamo.stores, record, event("model_response", **padding))
    dynamo.stores.turns.add_event(record.turn_id, event("text:delta", text="Hel"))
    record = step(dynamo.stores, record, event("tool_outcome"))
    dynamo.stores.turns.add_event(record.turn_id, event("text:delta", text="lo"))
    record = step(dynamo.stores, record, event("finished"))

    if flushes:
        assert any(sk.startswith("LOG#") for sk in partition(dynamo, record))
    kinds = [e["type"] for e in other_process(dynamo).turns.events(record.turn_id)]
    assert kinds == ["started", "model_response", "text:delta", "tool_outcome", "text:delta", "finished"]


def test_a_process_that_never_read_the_head_reads_it_once_then_writes(dynamo: Dynamo) -> None:
    record = started(dynamo)
    elsewhere = other_process(dynamo)
    dynamo.requests.clear()

    step(elsewhere, record, event("model_response"))

    assert dynamo.requests == {"GetItem": 1, "PutItem": 1}
    assert [e["type"] for e in elsewhere.turns.events(record.turn_id)] == ["started", "model_response"]
