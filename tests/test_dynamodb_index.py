"""The DynamoDB index: sharded partitions, key-only entries, and a lease renewal that moves nothing.

Issue 13's "no hot partition": every due turn, undelivered notification and open checkpoint used
to sit under one index key each (``DUE``, ``OUTBOX``, ``OPEN#<tenant>``), copied whole into the
index (projection ALL), and every lease renewal moved its turn's entry. These tests look at the
raw items and the index through moto, and meter the index writes with ``bench.meter.Meter``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench.meter import Meter
from samtranslator.yaml_helper import yaml_parse

from loopengine.app.ports import Stores
from loopengine.bootstrap import open_stores
from loopengine.domain import outbox
from loopengine.domain import turn_state as ts
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import ConfigError
from loopengine.domain.turns import TurnRecord, TurnStatus
from loopengine.stores.dynamodb import DynamoTurnStore, open_dynamodb_stores
from loopengine.stores.dynamodb_codec import shard_of, sortable
from loopengine.stores.dynamodb_index import shards_of
from loopengine.stores.dynamodb_table import DEFAULT_SHARDS, INDEX, INDEX_PROJECTED
from tests.contract import T0, checkpoint, turn
from tests.contract.conftest import moto_dynamodb

TABLE = "loopengine-test"
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Table:
    """A fresh moto table, its raw client, and stores on it with a given shard count."""

    client: Any
    clock: FakeClock

    def stores(self, shards: int) -> Stores:
        return open_dynamodb_stores(TABLE, self.clock, client=self.client, index_shards=shards)

    def raw(self, pk: str, sk: str) -> dict[str, Any]:
        found: dict[str, Any] = self.client.get_item(
            TableName=TABLE, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
        )["Item"]
        return found

    def index_items(self) -> list[dict[str, Any]]:
        pages = self.client.get_paginator("scan").paginate(TableName=TABLE, IndexName=INDEX)
        return [i for page in pages for i in page["Items"]]

    def meter(self) -> Meter:
        meter = Meter(index_name=INDEX, index_projection=INDEX_PROJECTED)
        meter.attach(self.client)
        return meter


@pytest.fixture
def table() -> Iterator[Table]:
    with moto_dynamodb(TABLE) as client:
        yield Table(client, FakeClock(T0))


def _note(turn_id: str, due: float) -> outbox.OutboxRecord:
    record = outbox.new_record(f"evt_{turn_id}", turn_id, "customer-service", "cfg", "approval", {}, T0)
    return dataclasses.replace(record, due_at=due)


def _running(due: float, lease: float) -> TurnRecord:
    return turn(status=TurnStatus.RUNNING, runner="run_a", lease_until=lease, due_at=due)


# --- the layout ----------------------------------------------------------------------------------


def test_due_turns_notifications_and_open_checkpoints_spread_over_the_shards(table: Table) -> None:
    stores = table.stores(shards=4)
    for n in range(40):  # ids fixed: a record's shard is a stable hash of its id, so every run spreads alike
        record = dataclasses.replace(turn(due_at=T0 + n), turn_id=f"turn_{n:032x}")
        stores.turns.create_turn(record)
        stores.turns.put_outbox(_note(record.turn_id, T0 + n))
        stores.checkpoints.create(checkpoint(tenant="acme", created_at=T0 + n))

    partitions = {i["gsi1pk"]["S"] for i in table.index_items()}
    assert partitions == {  # the families only the sweep reads: twice the shards (issue 27)
        *(f"DUE#{n}" for n in range(8)),
        *(f"OUTBOX#{n}" for n in range(8)),
        *(f"OPEN#acme#{n}" for n in range(4)),
    }


def test_a_records_shard_is_a_stable_hash_of_its_id() -> None:
    """The same id lands on the same shard in every process (Python's ``hash`` is salted per process)."""
    assert [shard_of("trn_0123456789abcdef0123456789abcdef", n) for n in (1, 16, 64)] == [0, 14, 46]
    assert shard_of("cp_x", 16) == shard_of("cp_x", 16)
    spread = {shard_of(f"trn_{n:032x}", 16) for n in range(200)}
    assert spread == set(range(16))


def test_the_index_holds_keys_and_the_agent_only(table: Table) -> None:
    stores = table.stores(shards=4)
    big = turn(due_at=T0, text="x" * 5000)  # a 5 KB turn: its index entry is still ~100 bytes
    cp = checkpoint(tenant="acme")
    stores.turns.create_turn(big)
    stores.checkpoints.create(cp)

    entries = {i["pk"]["S"]: set(i) for i in table.index_items()}
    assert entries == {
        f"TURN#{big.turn_id}": {"pk", "sk", "gsi1pk", "gsi1sk"},
        f"CP#{cp.id}": {"pk", "sk", "gsi1pk", "gsi1sk", "agent"},
    }
    described = table.client.describe_table(TableName=TABLE)["Table"]["GlobalSecondaryIndexes"]
    assert [(i["IndexName"], i["Projection"]) for i in described] == [
        (INDEX, {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(INDEX_PROJECTED)})
    ]


def test_the_template_declares_the_table_create_table_makes(table: Table) -> None:
    template = yaml_parse((ROOT / "template.yaml").read_text())
    declared = template["Resources"]["Table"]["Properties"]
    made = table.client.describe_table(TableName=TABLE)["Table"]
    (index,) = made["GlobalSecondaryIndexes"]
    assert declared["GlobalSecondaryIndexes"] == [
        {
            "IndexName": index["IndexName"],
            "KeySchema": index["KeySchema"],
            "Projection": index["Projection"],
        }
    ]
    assert declared["KeySchema"] == made["KeySchema"]
    assert sorted(declared["AttributeDefinitions"], key=str) == sorted(made["AttributeDefinitions"], key=str)


def test_the_shard_count_is_a_setting(table: Table) -> None:
    def shards(env: dict[str, str]) -> int:
        turns = open_stores({"LOOPENGINE_TABLE": TABLE, **env}, table.clock).turns
        assert isinstance(turns, DynamoTurnStore)
        return turns.table.shards

    assert (shards({}), shards({"LOOPENGINE_INDEX_SHARDS": "64"})) == (DEFAULT_SHARDS, 64)
    documented = (ROOT / "docs" / "configuration.md").read_text()
    assert f"| `LOOPENGINE_INDEX_SHARDS` | {DEFAULT_SHARDS} |" in documented
    template = yaml_parse((ROOT / "template.yaml").read_text())
    assert template["Parameters"]["IndexShards"]["Default"] == DEFAULT_SHARDS
    for bad in ("0", "-3", "many", "1.5"):
        with pytest.raises(ConfigError, match="LOOPENGINE_INDEX_SHARDS"):
            shards({"LOOPENGINE_INDEX_SHARDS": bad})


# --- what the index writes cost ----------------------------------------------------------------


def test_a_lease_renewal_writes_nothing_to_the_index(table: Table) -> None:
    stores = table.stores(shards=16)
    claimed = _running(due=T0 + 60, lease=T0 + 60)
    meter = table.meter()
    stores.turns.create_turn(claimed)
    entry = table.raw(f"TURN#{claimed.turn_id}", "TURN")["gsi1sk"]
    meter.clear()  # it keeps what the index holds

    current = claimed
    for beat in (20, 40, 60):
        renewed = ts.renew(current, "run_a", T0 + 60 + beat)
        assert renewed is not None
        current = stores.turns.replace_turn(renewed)
    answered = ts.model_answered(current, "run_a", T0 + 200)
    assert answered is not None
    stores.turns.replace_turn(answered)

    assert meter.report()["index_wru"] == {}
    assert set(meter.report()["partition_wru"]) == {f"TURN#{claimed.turn_id}"}  # the turn's writes alone
    assert table.raw(f"TURN#{claimed.turn_id}", "TURN")["gsi1sk"] == entry


def test_an_index_entry_is_billed_on_its_projected_size(table: Table) -> None:
    stores = table.stores(shards=16)
    meter = table.meter()
    big = turn(due_at=T0, text="x" * 5000)

    stores.turns.create_turn(big)  # one transaction: the turn (6 KB, twice) plus its session entries
    report = meter.report()
    (partition,) = report["index_wru"]
    assert report["index_wru"] == {partition: 1}
    assert partition == f"{INDEX}:DUE#{shard_of(big.turn_id, shards_of('DUE', 16))}"


# --- readers --------------------------------------------------------------------------------------


def test_a_larger_shard_count_still_finds_every_entry_written_under_a_smaller_one(table: Table) -> None:
    small = table.stores(shards=3)
    turns, cps, notes = [], [], []
    for n in range(12):
        record = turn(due_at=T0 + n)
        small.turns.create_turn(record)
        turns.append(record)
        note = _note(record.turn_id, T0 + n)
        small.turns.put_outbox(note)
        notes.append(note)
        cp = checkpoint(tenant="acme", created_at=T0 + n)
        small.checkpoints.create(cp)
        cps.append(cp)

    grown = table.stores(shards=16)
    assert grown.turns.due_turns(T0 + 100) == turns
    assert grown.turns.due_turns(T0 + 100, limit=7) == turns[:7]
    assert grown.turns.due_outbox(T0 + 100) == notes
    assert [cp.id for cp in grown.checkpoints.list_open("acme")] == [cp.id for cp in cps]


def test_list_open_keeps_to_its_tenant_and_agent_whatever_the_index_says(table: Table) -> None:
    stores = table.stores(shards=2)
    mine, theirs = checkpoint(tenant="acme"), checkpoint(tenant="globex")
    stores.checkpoints.create(mine)
    stores.checkpoints.create(theirs)
    table.client.update_item(  # a misfiled entry (never written so, but never trusted either)
        TableName=TABLE,
        Key={"pk": {"S": f"CP#{theirs.id}"}, "sk": {"S": "CP"}},
        UpdateExpression="SET gsi1pk = :p",
        ExpressionAttributeValues={":p": {"S": "OPEN#acme#0"}},
    )

    assert [cp.id for cp in stores.checkpoints.list_open("acme")] == [mine.id]
    assert stores.checkpoints.list_open("acme", agent="someone-else") == []


def test_a_delivered_notification_leaves_the_index(table: Table) -> None:
    stores = table.stores(shards=4)
    record = turn(due_at=None, status=TurnStatus.PAUSED)
    stores.turns.create_turn(record)
    note = _note(record.turn_id, T0 + 30)
    stores.turns.put_outbox(note)
    listed = table.raw(f"TURN#{record.turn_id}", f"OUTBOX#{note.key}")
    assert listed["gsi1pk"]["S"] == f"OUTBOX#{shard_of(note.key, shards_of('OUTBOX', 4))}"
    assert listed["gsi1sk"]["S"] == f"{sortable(T0 + 30)}#{note.key}"

    stores.turns.put_outbox(outbox.delivered(note))

    delivered = table.raw(f"TURN#{record.turn_id}", f"OUTBOX#{note.key}")
    assert "gsi1pk" not in delivered and "gsi1sk" not in delivered
    assert stores.turns.due_outbox(T0 + 10**6) == []
