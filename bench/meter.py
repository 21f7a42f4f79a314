"""DynamoDB's on-demand bill for one boto3 client's requests, computed from the items themselves.

Standard library only, so both the project's environment and the peers' one (bench/peers/, with
LangGraph) import it. moto reports no real consumed capacity, so :class:`Meter` prices every request
with DynamoDB's published arithmetic (the Developer Guide's "read/write capacity unit consumption"):

- **reads**: one RRU per 4 KB, half of that when eventually consistent (the default; an index Query
  always is). GetItem rounds the item it finds (a miss still costs the minimum); BatchGetItem rounds
  each item on its own (each key is a GetItem); Query and Scan add up the page's items and round
  the sum once (at least the minimum); TransactGetItems costs twice a strongly consistent read.
  A read is billed on the whole item even when a ProjectionExpression returns less, so the size is
  the larger of what came back and what the meter saw written under that key.
- **writes**: one WRU per 1 KB of the item: PutItem the new item, DeleteItem the item deleted (at
  least 1), UpdateItem the larger of the item before and after (the meter asks for ``ALL_NEW`` when
  the caller asked for nothing and hands the caller the answer it asked for). BatchWriteItem prices
  each PutRequest and DeleteRequest as the single write. In TransactWriteItems every action (Put,
  Update, Delete, ConditionCheck) costs twice its single write; a ConditionCheck is priced on the item
  it checks; a transactional Update on the larger of the known item and its key plus new values.
- **index writes** (the Developer Guide's "Provisioned throughput considerations for global
  secondary indexes"): a write that gives an item its ``index_key`` puts its index entry (one
  write), one that changes an index key moves it (two: the old entry deleted, the new one put),
  one that drops the key deletes it (one), one that changes only projected attributes updates it
  (one), and one that changes neither writes nothing to the index. Each is sized on the entry,
  not the item: the table's and the index's keys plus ``index_projection`` (None: projection ALL,
  the whole item). An index write is billed once even inside a transaction: only the items of
  the transaction are written twice (prepare and commit); the index is updated from the result
  (as measured against DynamoDB by nubo-db/dynoxide#188). This is where a hot partition shows.

Not seen, so not billed: items a Query/Scan FilterExpression or ``Select=COUNT`` read but did not
return, and the size of items written before the meter was attached (their deletes cost the minimum).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

WRITE_UNIT = 1024
"""Bytes per write unit."""
READ_UNIT = 4096
"""Bytes per read unit (strongly consistent)."""
_STRIP = "meter.strip_attributes"
"""Request-context flag: the meter asked for ``ReturnValues`` the caller did not want."""
_KEYS = "meter.batch_keys"
"""Request-context note: keys asked for per table of a BatchGetItem, and whether consistently."""
_FACTOR = "meter.read_factor"
"""Request-context note: 1 for a strongly consistent GetItem/Query/Scan, 0.5 for an eventual one."""
_UPDATED = "meter.updated_key"
"""Request-context note: the key an UpdateItem names."""
_READ_KEY = "meter.read_key"
"""Request-context note: the partition (and sort) key a GetItem or base-table Query names."""
_EQUALS = re.compile(r"(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)")

Item = dict[str, Any]


def _size(item: Item) -> int:
    """An item's size as DynamoDB bills it (names plus values; close enough for string/number/binary)."""
    total = 0
    for name, value in item.items():
        ((kind, body),) = value.items()
        if kind in ("SS", "BS"):  # a set: the sum of its members
            total += len(name) + sum(len(member) for member in body)
        else:
            total += len(name) + (len(body) if isinstance(body, bytes | str) else len(json.dumps(body)))
    return total


@dataclass(frozen=True)
class _Entry:
    """An item's entry in the index: where it is, what it projects (as JSON), and its size."""

    partition: str
    sort: str
    projected: str
    size: int


def _units(size: int, unit: int) -> int:
    """Whole units for ``size`` bytes, at least one."""
    return max(1, math.ceil(size / unit))


@dataclass
class Meter:
    """Requests, items read and read/write units of one client, by operation and by partition.

    ``key`` names the table's partition and sort key attributes; ``index_key`` the one global secondary
    index's (None: no index), whose partitions are reported as ``f"{index_name}:{value}"``;
    ``index_projection`` the non-key attributes it projects (None: ALL). The defaults are
    loopengine's table (``loopengine.stores.dynamodb_table``: ``INDEX``, ``INDEX_PROJECTED``).
    """

    key: tuple[str, str] = ("pk", "sk")
    index_key: tuple[str, str] | None = ("gsi1pk", "gsi1sk")
    index_name: str = "gsi2"
    index_projection: tuple[str, ...] | None = ("agent",)
    requests: Counter[str] = field(default_factory=Counter)
    items_read: int = 0
    rru: float = 0.0
    wru: float = 0.0
    partition_wru: Counter[str] = field(default_factory=Counter)
    indexed: dict[tuple[str, str], _Entry] = field(default_factory=dict)
    sizes: dict[tuple[str, str], int] = field(default_factory=dict)

    def clear(self) -> None:
        """Start counting afresh (what the table and index hold is kept)."""
        self.requests.clear()
        self.partition_wru.clear()
        self.items_read, self.rru, self.wru = 0, 0.0, 0.0

    def attach(self, client: Any) -> None:
        """Meter every call made through ``client`` (a boto3 DynamoDB client) from now on."""
        events = client.meta.events
        events.register("before-call.dynamodb", self._called)
        events.register("before-parameter-build.dynamodb", self._writing)
        events.register("after-call.dynamodb", self._answered)

    def report(self) -> dict[str, Any]:
        """What was counted since the last clear."""
        prefix = f"{self.index_name}:"
        return {
            "requests": self.requests.total(),
            "by_operation": dict(sorted(self.requests.items())),
            "items_read": self.items_read,
            "rru": self.rru,
            "wru": self.wru,
            "index_wru": {k: v for k, v in sorted(self.partition_wru.items()) if k.startswith(prefix)},
            "partition_wru": dict(sorted(self.partition_wru.items())),
        }

    # -- requests and writes, priced from the request -------------------------------------------------

    def _called(self, model: Any, **_: Any) -> None:
        self.requests[model.name] += 1

    def _where(self, item: Item) -> tuple[str, str]:
        pk, sk = self.key
        return (str(item[pk]["S"]), str(item[sk]["S"]) if sk in item else "")

    def _writing(self, params: dict[str, Any], model: Any, context: Any = None, **_: Any) -> None:
        name = model.name
        if name == "PutItem":
            self._write(params["Item"], 1)
        elif name == "DeleteItem":
            self._drop(params["Key"], 1)
        elif name == "UpdateItem" and context is not None:
            context[_UPDATED] = self._where(params["Key"])
            if params.get("ReturnValues", "NONE") == "NONE":
                params["ReturnValues"] = "ALL_NEW"  # priced in _answered, then taken away again
                context[_STRIP] = True
        elif name in ("GetItem", "Query", "Scan") and context is not None:
            strong = bool(params.get("ConsistentRead")) and "IndexName" not in params
            context[_FACTOR] = 1.0 if strong else 0.5
            context[_READ_KEY] = self._read_key(params)
        elif name == "TransactWriteItems":
            for action in params["TransactItems"]:
                self._transacted(action)
        elif name == "BatchWriteItem":
            for requests in params["RequestItems"].values():
                for request in requests:
                    if "PutRequest" in request:
                        self._write(request["PutRequest"]["Item"], 1)
                    elif "DeleteRequest" in request:
                        self._drop(request["DeleteRequest"]["Key"], 1)
        elif name == "BatchGetItem" and context is not None:
            context[_KEYS] = {
                table: (len(asked["Keys"]), bool(asked.get("ConsistentRead")))
                for table, asked in params["RequestItems"].items()
            }

    def _transacted(self, action: dict[str, Any]) -> None:
        """One action of a TransactWriteItems: twice its single write."""
        if "Put" in action:
            self._write(action["Put"]["Item"], 2)
        elif "Delete" in action:
            self._drop(action["Delete"]["Key"], 2)
        elif "Update" in action:
            update = action["Update"]
            where = self._where(update["Key"])
            values = update.get("ExpressionAttributeValues", {})
            names = update.get("ExpressionAttributeNames", {})
            after = (
                _size(update["Key"])
                + sum(_size({"": v}) for v in values.values())
                + sum(len(n.encode()) for n in names.values())
            )  # (a counter item an ADD creates: its key, its attributes' names and values)
            units = 2 * _units(max(self.sizes.get(where, 0), after), WRITE_UNIT)
            self.sizes[where] = max(self.sizes.get(where, 0), after)
            self.wru += units
            self.partition_wru[where[0]] += units
        elif "ConditionCheck" in action:
            where = self._where(action["ConditionCheck"]["Key"])
            units = 2 * _units(self.sizes.get(where, 0), WRITE_UNIT)
            self.wru += units
            self.partition_wru[where[0]] += units

    def _write(self, item: Item, factor: int, before: int = 0) -> None:
        """A put of ``item`` (or an update leaving it so, ``before`` bytes before) and its index entry."""
        where = self._where(item)
        size = _size(item)
        units = factor * _units(max(size, before), WRITE_UNIT)
        self.sizes[where] = size
        self.wru += units
        self.partition_wru[where[0]] += units
        old = self.indexed.pop(where, None)
        new = self._entry(item)
        if new is not None:
            self.indexed[where] = new
        moved = old is not None and (new is None or (new.partition, new.sort) != (old.partition, old.sort))
        if old is not None and moved:
            self._index_write(old)  # the old entry goes
        if new is not None and (old is None or moved or new.projected != old.projected):
            self._index_write(new)

    def _drop(self, key: Item, factor: int) -> None:
        where = self._where(key)
        units = factor * _units(self.sizes.pop(where, 0), WRITE_UNIT)
        self.wru += units
        self.partition_wru[where[0]] += units
        old = self.indexed.pop(where, None)
        if old is not None:
            self._index_write(old)

    def _entry(self, item: Item) -> _Entry | None:
        """``item``'s index entry, or None when it carries no index partition key."""
        if self.index_key is None or self.index_key[0] not in item:
            return None
        ipk, isk = self.index_key
        keys = {name for name in (*self.key, ipk, isk) if name in item}
        wanted = set(item) - keys if self.index_projection is None else set(self.index_projection)
        projected = {name: item[name] for name in sorted(wanted & set(item))}
        held = {name: item[name] for name in keys} | projected
        return _Entry(
            str(item[ipk]["S"]),
            str(item[isk]["S"]) if isk in item else "",
            json.dumps(projected, sort_keys=True, default=str),
            _size(held),
        )

    def _index_write(self, entry: _Entry) -> None:
        """One write of ``entry`` to the index (a put or a delete), sized on the entry, never doubled."""
        units = _units(entry.size, WRITE_UNIT)
        self.partition_wru[f"{self.index_name}:{entry.partition}"] += units
        self.wru += units

    # -- reads (and UpdateItem), priced from the answer -------------------------------------------------

    def _answered(self, parsed: dict[str, Any], model: Any, context: Any = None, **_: Any) -> None:
        name = model.name
        if name == "UpdateItem":
            self._updated(parsed, context)
            return
        if name not in ("GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"):
            return
        if "Error" in parsed:
            return
        factor = float((context or {}).get(_FACTOR, 0.5))
        hint = (context or {}).get(_READ_KEY, (None, None))
        if name == "GetItem":
            found = [parsed["Item"]] if "Item" in parsed else []
            self.items_read += len(found)
            self.rru += _units(self._read_size(found[0], hint) if found else 0, READ_UNIT) * factor
        elif name in ("Query", "Scan"):
            found = list(parsed.get("Items", []))
            self.items_read += len(found)
            self.rru += _units(sum(self._read_size(i, hint) for i in found), READ_UNIT) * factor
        elif name == "TransactGetItems":
            found = [r["Item"] for r in parsed.get("Responses", []) if "Item" in r]
            self.items_read += len(found)
            self.rru += sum(2 * _units(self._read_size(i), READ_UNIT) for i in found)
        else:
            self._batch_read(parsed, (context or {}).get(_KEYS, {}))

    def _batch_read(self, parsed: dict[str, Any], asked: dict[str, tuple[int, bool]]) -> None:
        unprocessed = parsed.get("UnprocessedKeys", {})
        for table, (count, consistent) in asked.items():
            found = list(parsed.get("Responses", {}).get(table, []))
            missed = count - len(found) - len(unprocessed.get(table, {}).get("Keys", []))
            factor = 1.0 if consistent else 0.5
            self.items_read += len(found)
            self.rru += factor * (sum(_units(self._read_size(i), READ_UNIT) for i in found) + max(0, missed))

    def _read_key(self, params: dict[str, Any]) -> tuple[str | None, str | None]:
        """The partition (and, for a GetItem, sort) key value a read names, for items it returns without."""
        pk, sk = self.key
        if "Key" in params:
            key = params["Key"]
            return (str(key[pk]["S"]) if pk in key else None, str(key[sk]["S"]) if sk in key else None)
        if "IndexName" in params or "KeyConditionExpression" not in params:
            return (None, None)
        names = params.get("ExpressionAttributeNames", {})
        values = params.get("ExpressionAttributeValues", {})
        for name, placeholder in _EQUALS.findall(params["KeyConditionExpression"]):
            if names.get(name, name) == pk and "S" in values.get(placeholder, {}):
                return (str(values[placeholder]["S"]), None)
        return (None, None)

    def _read_size(self, item: Item, hint: tuple[str | None, str | None] = (None, None)) -> int:
        """What a read of ``item`` is billed on: the whole item, not only the projected attributes.

        A ProjectionExpression may leave the key out of what comes back; ``hint`` is the key the
        request named (:meth:`_read_key`).
        """
        pk, sk = self.key
        partition = str(item[pk]["S"]) if pk in item else hint[0]
        sort = str(item[sk]["S"]) if sk in item else hint[1]
        seen = (
            self.sizes.get((partition, sort if sort is not None else ""), 0) if partition is not None else 0
        )
        return max(seen, _size(item))

    def _updated(self, parsed: dict[str, Any], context: Any) -> None:
        context = context if context is not None else {}
        strip = bool(context.pop(_STRIP, False))
        after = parsed.pop("Attributes", None) if strip else parsed.get("Attributes")
        where = context.get(_UPDATED)
        if after is not None and self.key[0] in after:
            self._write(after, 1, before=self.sizes.get(self._where(after), 0))
        elif where is not None:  # failed, or the caller's ReturnValues left the new item unknown
            units = _units(self.sizes.get(where, 0), WRITE_UNIT)
            self.wru += units
            self.partition_wru[where[0]] += units
