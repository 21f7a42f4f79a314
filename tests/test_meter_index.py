"""How ``bench.meter.Meter`` bills a global secondary index: DynamoDB's rules, item by item.

The Developer Guide ("Provisioned throughput considerations for global secondary indexes", write
capacity units): a write that puts an item into the index is one index write, one that changes an
index key attribute is two (the old entry deleted, the new one put), one that drops the key
attributes deletes the entry, one that changes only projected attributes is one, and one that
changes neither costs the index nothing. Each is sized on the index entry (the table and index
keys plus the projected attributes), not the item. An index write costs the same inside a
transaction (only the table's items are written twice, to prepare and commit).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from bench.meter import Meter

from tests.contract.conftest import moto_dynamodb

TABLE = "loopengine-meter"
INDEX = "idx"
BIG = "x" * 3000  # a 3 KB attribute: 3 WRU in the table, nothing in a key-only entry


@pytest.fixture
def client() -> Iterator[Any]:
    with moto_dynamodb(TABLE) as made:
        yield made


def _item(sk: str = "A", due: str | None = "t1", agent: str = "a", **more: str) -> dict[str, Any]:
    item = {"pk": {"S": "TURN#1"}, "sk": {"S": sk}, "agent": {"S": agent}, "body": {"S": BIG}}
    if due is not None:
        item |= {"gsi1pk": {"S": "DUE#3"}, "gsi1sk": {"S": due}}
    return item | {k: {"S": v} for k, v in more.items()}


def _meter(client: Any, projection: tuple[str, ...] | None) -> Meter:
    meter = Meter(index_name=INDEX, index_projection=projection)
    meter.attach(client)
    return meter


def _index_wru(meter: Meter) -> float:
    total: float = sum(meter.report()["index_wru"].values())
    return total


def _put(client: Any, item: dict[str, Any]) -> None:
    client.put_item(TableName=TABLE, Item=item)


def test_a_new_entry_costs_one_write_sized_on_what_the_index_holds(client: Any) -> None:
    keys_only, everything = _meter(client, ("agent",)), _meter(client, None)

    _put(client, _item())

    assert _index_wru(keys_only) == 1
    assert _index_wru(everything) == 3  # projection ALL copies the 3 KB body too
    assert keys_only.report()["index_wru"] == {f"{INDEX}:DUE#3": 1}


def test_a_put_that_changes_neither_key_nor_projection_costs_the_index_nothing(client: Any) -> None:
    meter = _meter(client, ("agent",))
    _put(client, _item())
    meter.clear()

    _put(client, _item(wtok="another write token", version="7"))

    assert _index_wru(meter) == 0
    assert meter.report()["wru"] == 3  # the table write alone


def test_a_changed_projected_attribute_is_one_write_and_a_moved_key_two(client: Any) -> None:
    meter = _meter(client, ("agent",))
    _put(client, _item())
    meter.clear()

    _put(client, _item(agent="b"))
    assert _index_wru(meter) == 1

    meter.clear()
    _put(client, _item(agent="b", due="t2"))
    assert _index_wru(meter) == 2


def test_leaving_the_index_is_one_delete_whether_by_put_or_by_delete(client: Any) -> None:
    meter = _meter(client, ("agent",))
    _put(client, _item())
    _put(client, _item(sk="B"))
    meter.clear()

    _put(client, _item(due=None))
    assert _index_wru(meter) == 1
    client.delete_item(TableName=TABLE, Key={"pk": {"S": "TURN#1"}, "sk": {"S": "B"}})
    assert _index_wru(meter) == 2
    client.delete_item(TableName=TABLE, Key={"pk": {"S": "TURN#1"}, "sk": {"S": "A"}})
    assert _index_wru(meter) == 2  # it had left the index already


def test_a_transaction_doubles_the_table_write_and_not_the_index_write(client: Any) -> None:
    meter = _meter(client, ("agent",))

    client.transact_write_items(TransactItems=[{"Put": {"TableName": TABLE, "Item": _item()}}])

    assert _index_wru(meter) == 1
    assert meter.report()["wru"] == 2 * 3 + 1
