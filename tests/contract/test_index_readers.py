"""The readers of due work and open items return one merged order, whatever the store spreads them over.

DynamoDB spreads due turns, notifications and open checkpoints over index shards (a hash of each
record's id); SQLite keeps one table each. Either way ``due_turns``, ``due_outbox`` and
``list_open`` answer earliest first across everything, and ``limit`` takes the earliest.
"""

from __future__ import annotations

import dataclasses
import random

from loopengine.app.ports import Stores
from loopengine.domain import outbox
from loopengine.domain.turns import TurnStatus
from tests.contract import T0, checkpoint, turn

COUNT = 40


def _shuffled_times(seed: int) -> list[float]:
    times = [T0 + n * 7.5 for n in range(COUNT)]
    random.Random(seed).shuffle(times)
    return times


def test_due_turns_merges_every_shard_earliest_first_and_takes_the_earliest(stores: Stores) -> None:
    made = []
    for due in _shuffled_times(1):
        record = turn(due_at=due)
        stores.turns.create_turn(record)
        made.append(record)
    stores.turns.create_turn(turn(status=TurnStatus.PAUSED, due_at=None))
    ordered = sorted(made, key=lambda t: t.due_at or 0.0)
    now = T0 + 20 * 7.5

    assert stores.turns.due_turns(now) == [t for t in ordered if (t.due_at or 0.0) <= now]
    assert stores.turns.due_turns(now, limit=5) == ordered[:5]
    assert stores.turns.due_turns(T0 + 10**6, limit=COUNT) == ordered
    assert stores.turns.due_turns(T0 - 1) == []


def test_due_outbox_merges_every_shard_earliest_first_and_takes_the_earliest(stores: Stores) -> None:
    made = []
    for n, due in enumerate(_shuffled_times(2)):
        record = outbox.new_record(f"evt_{n:03d}", f"trn_{n:03d}", "a", "cfg", "approval", {}, T0)
        record = dataclasses.replace(record, due_at=due)
        stores.turns.put_outbox(record)
        made.append(record)
    ordered = sorted(made, key=lambda r: r.due_at or 0.0)

    assert stores.turns.due_outbox(T0 + 10**6) == ordered
    assert stores.turns.due_outbox(T0 + 10**6, limit=3) == ordered[:3]
    assert stores.turns.due_outbox(T0 + 5 * 7.5) == ordered[:6]


def test_list_open_merges_every_shard_oldest_first(stores: Stores) -> None:
    made = []
    for n, created in enumerate(_shuffled_times(3)):
        cp = checkpoint(tenant="acme", created_at=created, agent="a" if n % 2 else "b")
        stores.checkpoints.create(cp)
        made.append(cp)
    stores.checkpoints.create(checkpoint(tenant="globex", created_at=T0))
    ordered = sorted(made, key=lambda c: c.created_at)

    assert [c.id for c in stores.checkpoints.list_open("acme")] == [c.id for c in ordered]
    only_a = [c.id for c in ordered if c.agent == "a"]
    assert [c.id for c in stores.checkpoints.list_open("acme", agent="a")] == only_a
