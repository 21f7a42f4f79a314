"""The sparse index of the DynamoDB stores: sharded partitions of key-only entries, merged on read.

Three families of records need finding without their ids: turns due for the sweep (``DUE``),
undelivered notifications (``OUTBOX``) and a tenant's open checkpoints (``OPEN#<tenant>``). Each
such item carries index keys; the index (:data:`~loopengine.stores.dynamodb_table.INDEX`) holds
only those keys plus ``agent``, so an index entry is ~100 bytes whatever the record's size, and a
write of the record that keeps its index key (and agent) writes nothing to the index.

**Shards.** One partition per family would take every tenant's writes: a partition takes about
1,000 write units a second. So a family is spread over ``shards`` partitions, ``<family>#<n>``
with ``n`` a stable hash of the record's id (:func:`~loopengine.stores.dynamodb_codec.shard_of`);
the sort key orders the entries by time (``<t>#<id>``). A reader Queries every shard and merges
them by sort key, so it answers in one order and ``limit`` takes the earliest across all shards.

**Growing the count.** Raising ``shards`` (``LOOPENGINE_INDEX_SHARDS``) moves each record to its
new shard the next time it is written; until then its entry sits in a shard below the old count,
which the readers still read. Lowering it would strand entries in shards nobody reads: the count
may only grow.

Index reads are eventually consistent; a reader then fetches the records themselves with
consistent BatchGetItem requests (100 keys each, unprocessed keys retried), in index order, and
its caller re-checks each record (a record moved on since its entry was read is left out).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

from loopengine.stores.dynamodb_codec import Item, key, s, shard_of, sortable
from loopengine.stores.dynamodb_table import DynamoTable

PARTITION, SORT = "gsi1pk", "gsi1sk"
SWEPT = frozenset({"DUE", "OUTBOX"})
"""The families only the sweep reads (once a pass): spread over :data:`SWEPT_FACTOR` times the shards."""
SWEPT_FACTOR = 2
"""Every notification puts its entry and drops it at delivery, every turn its due times: with a notifier
taking every event, ``OUTBOX`` takes the most index writes per cycle (12). More shards cost a sweep a
few more Queries a minute; ``OPEN#<tenant>``, which the pending list reads per request, keeps ``shards``."""


def shards_of(family: str, shards: int) -> int:
    """How many partitions ``family`` is spread over when the table's count is ``shards``."""
    return shards * SWEPT_FACTOR if family in SWEPT else shards


def entry(family: str, record_id: str, at: float, shards: int) -> Item:
    """The index keys that list ``record_id`` under ``family`` at time ``at``."""
    shard = shard_of(record_id, shards_of(family, shards))
    return {PARTITION: s(f"{family}#{shard}"), SORT: s(f"{sortable(at)}#{record_id}")}


def partitions(family: str, shards: int) -> list[str]:
    """Every partition a reader of ``family`` reads: one per shard."""
    return [f"{family}#{n}" for n in range(shards_of(family, shards))]


def read(
    table: DynamoTable,
    family: str,
    *,
    below: float | None = None,
    limit: int | None = None,
    **extra: Any,
) -> list[Item]:
    """The items listed under ``family`` (sort key below time ``below``), earliest first, at most ``limit``.

    One Query per partition (each stops at ``limit`` entries), merged by sort key; then the items
    themselves, read consistently. An entry whose item is gone is left out. ``extra``: a
    FilterExpression on the projected ``agent`` and its placeholders.
    """
    bound = None if below is None else f"{sortable(below)}#~"
    page: dict[str, Any] = {} if limit is None else {"Limit": limit}
    names = partitions(family, table.shards)
    shards = [table.query(name, index=True, below=bound, **page, **extra) for name in names]
    merged = heapq.merge(*shards, key=lambda i: str(i[SORT]["S"]))
    # one item may show twice for a moment (its entry moved to another shard): BatchGetItem refuses
    # a repeated key, and the first place is the earlier one
    listed = list(dict.fromkeys((i["pk"]["S"], i["sk"]["S"]) for i in itertools.islice(merged, limit)))
    found = {(i["pk"]["S"], i["sk"]["S"]): i for i in table.batch_get([key(pk, sk) for pk, sk in listed])}
    return [found[where] for where in listed if where in found]
