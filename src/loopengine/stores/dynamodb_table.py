"""DynamoDB plumbing for the store adapter: the lazy client, conditional writes, errors, the table.

Nothing here imports boto3 or botocore at module level: the client is made on first use (a client
made at import time would escape moto, and a process on SQLite never pays for boto3).

Errors: a failed condition becomes :class:`ConditionFailed` carrying the stored item (every
conditional write asks for ``ReturnValuesOnConditionCheckFailure=ALL_OLD``, so nobody needs a second
read); a transaction cancelled by a failed condition becomes :class:`TransactionCancelled` with the
per-action reasons. A transaction that lost to another transaction is retried a bounded number of
times; everything else is :class:`~loopengine.domain.base.errors.StoreError` raised ``from`` botocore's
exception, after botocore's own bounded ``standard``-mode retries (throttling, 5xx, timeouts).

Idempotency: each ``put`` and each ``transact`` is one logical write with one token
(:mod:`~loopengine.stores.dynamodb_tokens`): stamped on every item it writes and sent as the
transaction's ``ClientRequestToken``, the same on every retry of that write (botocore's and ours).
A condition that fails on an item carrying our own token is our earlier send that landed while its
response was lost: the write succeeded, and no caller ever sees it as a conflict.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from loopengine.domain.base.errors import StoreError
from loopengine.stores.dynamodb_client import new_client as new_client
from loopengine.stores.dynamodb_codec import Item, inline, key, manifest, n, reassemble, s
from loopengine.stores.dynamodb_tokens import carries, new_token, stamp, stamp_action

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

TRANSACTION_ITEMS = 100
"""DynamoDB's cap on actions per TransactWriteItems."""
TRANSACTION_BUDGET = 3_500_000
"""Inline body bytes allowed across one transaction (DynamoDB caps its aggregate size at 4 MB)."""
BATCH_WRITE_ITEMS = 25
BATCH_GET_KEYS = 100
INDEX = "gsi2"
"""The sparse index (keys ``gsi1pk`` / ``gsi1sk``): due turns, undelivered notifications, open checkpoints."""
INDEX_PROJECTED = ("agent",)
"""What the index holds besides the keys (``list_open`` filters by it); readers fetch the rest."""
DEFAULT_SHARDS = 16
"""Index shards per family of entries (``LOOPENGINE_INDEX_SHARDS``); a count that may only grow."""


@dataclass(frozen=True)
class Condition:
    """A ConditionExpression with its placeholders."""

    expression: str
    names: dict[str, str] = field(default_factory=dict)
    values: Item = field(default_factory=dict)

    def params(self) -> dict[str, Any]:
        """The request parameters for this condition."""
        out = {
            "ConditionExpression": self.expression,
            "ExpressionAttributeNames": self.names,
            "ExpressionAttributeValues": self.values,
        }
        return {k: v for k, v in out.items() if v}


ABSENT = Condition("attribute_not_exists(pk)")
"""The key is not taken yet: every create."""


def version_is(expected: int) -> Condition:
    """The stored item exists and still carries version ``expected``: every compare-and-set.

    A missing item fails it too (a comparison with an absent attribute is false)::

        A   get -> v3 .......................... put v4 if version = 3 -> ConditionalCheckFailed
        B   get -> v3 ... put v4 if version = 3 -> ok                      ALL_OLD: B's v4, no re-read
    """
    return Condition("#version = :expected", {"#version": "version"}, {":expected": n(expected)})


class ConditionFailed(Exception):
    """A conditional write found its condition false; ``old`` is the stored item, or None."""

    def __init__(self, old: Item | None) -> None:
        super().__init__("condition failed")
        self.old = old


class TransactionCancelled(Exception):
    """A transaction failed a condition; ``reasons`` has one entry per action (``Code``, ``Item``)."""

    def __init__(self, reasons: list[dict[str, Any]]) -> None:
        super().__init__("transaction cancelled")
        self.reasons = reasons

    def failed(self, index: int) -> bool:
        """Whether action ``index`` is one whose condition failed."""
        return self.reasons[index].get("Code") == "ConditionalCheckFailed"

    def old(self, index: int) -> Item | None:
        """The stored item of action ``index`` (ALL_OLD), or None."""
        item: Item | None = self.reasons[index].get("Item")
        return item


class _Transient(Exception):
    """A transaction lost to another transaction (or was throttled): worth trying again."""


_TRANSIENT_REASONS = {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
_IN_PROGRESS = "TransactionInProgressException"
"""Our own transaction (same ClientRequestToken) is still being applied: ask again, same token."""


@contextmanager
def _errors(operation: str) -> Iterator[None]:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "ConditionalCheckFailedException":
            old: Item | None = cast("Item | None", exc.response.get("Item"))
            raise ConditionFailed(old) from exc
        if code == _IN_PROGRESS:
            raise _Transient(operation) from exc
        if code == "TransactionCanceledException":
            reasons = [dict(r) for r in exc.response.get("CancellationReasons") or []]
            if any(r.get("Code") == "ConditionalCheckFailed" for r in reasons):
                raise TransactionCancelled(reasons) from exc
            if reasons and all(r.get("Code") in _TRANSIENT_REASONS | {"None"} for r in reasons):
                raise _Transient(operation) from exc
        raise StoreError(f"DynamoDB {operation} failed: {code or exc}") from exc
    except BotoCoreError as exc:
        raise StoreError(f"DynamoDB {operation} failed: {exc}") from exc


def _backoff(attempt: int) -> None:
    time.sleep(random.uniform(0, 0.025 * 2**attempt))


def count_requests(client: DynamoDBClient) -> Counter[str]:
    """Count the API calls made through ``client`` from now on, by operation name.

    Each call counts once however many times botocore retried it; ``.total()`` sums them.
    """
    counts: Counter[str] = Counter()

    def tally(model: Any, **_: Any) -> None:
        counts[model.name] += 1

    client.meta.events.register("before-call.dynamodb", tally)
    return counts


def create_table(client: DynamoDBClient, name: str) -> None:
    """Create the single table (keys, the index, on-demand billing, TTL on ``ttl``) and wait for it."""
    strings = ("pk", "sk", "gsi1pk", "gsi1sk")

    def schema(hash_key: str, range_key: str) -> list[Any]:
        return [
            {"AttributeName": hash_key, "KeyType": "HASH"},
            {"AttributeName": range_key, "KeyType": "RANGE"},
        ]

    with _errors("CreateTable"):
        client.create_table(
            TableName=name,
            AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in strings],
            KeySchema=schema("pk", "sk"),
            GlobalSecondaryIndexes=[
                {
                    "IndexName": INDEX,
                    "KeySchema": schema("gsi1pk", "gsi1sk"),
                    "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(INDEX_PROJECTED)},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        client.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
        )


class DynamoTable:
    """The single table: lazy client, consistent reads, conditional writes, the blob codec.

    ``shards``: how many index partitions each family of index entries is spread over.
    """

    def __init__(
        self,
        name: str,
        client: DynamoDBClient | None = None,
        max_attempts: int = 5,
        shards: int = DEFAULT_SHARDS,
    ) -> None:
        if shards < 1:
            raise ValueError(f"index shards must be at least 1, not {shards}")
        self.name = name
        self.max_attempts = max_attempts
        self.shards = shards
        self._client = client
        self._lock = threading.Lock()

    @property
    def client(self) -> DynamoDBClient:
        """The client, created on first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = new_client(self.max_attempts)
        return self._client

    def get(self, pk: str, sk: str) -> Item | None:
        """Read one item with a strongly consistent read."""
        with _errors("GetItem"):
            found = self.client.get_item(TableName=self.name, Key=key(pk, sk), ConsistentRead=True)
        item: Item | None = found.get("Item")
        return item

    def put(self, item: Item, condition: Condition | None = None) -> None:
        """Write one item, under ``condition`` if given (ConditionFailed carries the stored item).

        The item carries a fresh write token: a condition failing on our own landed write (botocore
        re-sent it) is a success, not a ConditionFailed.
        """
        self._put_item(item, condition.params() if condition else {})

    def _put_item(self, item: Item, params: dict[str, Any]) -> None:
        token = new_token()
        try:
            with _errors("PutItem"):
                self.client.put_item(
                    TableName=self.name,
                    Item=stamp(item, token),
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **params,
                )
        except ConditionFailed as failed:
            if not carries(failed.old, token):
                raise

    def delete(self, pk: str, sk: str) -> None:
        """Delete one item (nothing happens when it is gone already)."""
        with _errors("DeleteItem"):
            self.client.delete_item(TableName=self.name, Key=key(pk, sk))

    def put_action(self, item: Item, condition: Condition) -> dict[str, Any]:
        """One conditional Put of a transaction."""
        put = {"TableName": self.name, "Item": item, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
        return {"Put": {**put, **condition.params()}}

    def transact(self, actions: Sequence[dict[str, Any]]) -> None:
        """All ``actions`` or none; a lost race with another transaction is retried (bounded).

        A single Put is sent as a PutItem (the same all-or-nothing, half the write units); its failed
        condition is a :class:`TransactionCancelled` like a transaction's.

        One token for the whole logical transaction: its ``ClientRequestToken`` on every send, and
        stamped on each item it writes. A cancellation whose failed condition found an item
        carrying that token is this transaction, already applied: a success.
        """
        if len(actions) == 1 and "Put" in actions[0]:  # one item: a PutItem, half the write units
            skip = ("TableName", "Item", "ReturnValuesOnConditionCheckFailure")
            put = {k: v for k, v in actions[0]["Put"].items() if k not in skip}
            try:
                self._put_item(actions[0]["Put"]["Item"], put)
            except ConditionFailed as failed:
                raise TransactionCancelled([{"Code": "ConditionalCheckFailed", "Item": failed.old}]) from None
            return
        token = new_token()
        items = cast("Sequence[TransactWriteItemTypeDef]", [stamp_action(a, token) for a in actions])
        for attempt in range(self.max_attempts):
            try:
                with _errors("TransactWriteItems"):
                    self.client.transact_write_items(TransactItems=items, ClientRequestToken=token)
                return
            except TransactionCancelled as lost:
                if any(lost.failed(i) and carries(lost.old(i), token) for i in range(len(lost.reasons))):
                    return
                raise
            except _Transient as exc:
                if attempt + 1 == self.max_attempts:
                    raise StoreError("DynamoDB TransactWriteItems kept conflicting") from exc
                _backoff(attempt)

    def query(
        self,
        pk: str,
        prefix: str | None = None,
        *,
        index: bool = False,
        below: str | None = None,
        between: tuple[str, str] | None = None,
        **extra: Any,
    ) -> Iterator[Item]:
        """Every item of a partition (or of the index) whose sort key starts with ``prefix``, in order.

        ``below`` instead selects the sort keys less than it, ``between`` those from its first to its
        second (both included). Base-table queries are strongly
        consistent; the index can only be read eventually consistent. ``extra`` adds request
        parameters (a FilterExpression and its placeholders, a page ``Limit``).
        """
        hash_key, range_key = ("gsi1pk", "gsi1sk") if index else ("pk", "sk")
        condition, bound = "#pk = :pk", {}
        if prefix is not None:
            condition, bound = condition + " AND begins_with(#sk, :sk)", {":sk": s(prefix)}
        elif below is not None:
            condition, bound = condition + " AND #sk < :sk", {":sk": s(below)}
        elif between is not None:
            condition += " AND #sk BETWEEN :sk AND :hi"
            bound = {":sk": s(between[0]), ":hi": s(between[1])}
        names = {"#pk": hash_key, **({"#sk": range_key} if bound else {}), **extra.pop("names", {})}
        values = {":pk": s(pk), **bound, **extra.pop("values", {})}
        params: dict[str, Any] = {
            "TableName": self.name,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            **({"IndexName": INDEX} if index else {"ConsistentRead": True}),
            **extra,
        }
        while True:
            with _errors("Query"):
                page = self.client.query(**params)
            yield from page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                return
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def batch_get(self, keys: list[Item]) -> list[Item]:
        """Consistent reads of ``keys`` (missing ones are left out), in no particular order."""
        found: list[Item] = []
        for start in range(0, len(keys), BATCH_GET_KEYS):
            pending: dict[str, Any] = {
                self.name: {"Keys": keys[start : start + BATCH_GET_KEYS], "ConsistentRead": True}
            }
            stalled = 0
            while pending:
                with _errors("BatchGetItem"):
                    page = self.client.batch_get_item(RequestItems=pending)
                got = page.get("Responses", {}).get(self.name, [])
                found += got
                pending = dict(page.get("UnprocessedKeys") or {})
                stalled = 0 if got else stalled + 1
                self._wait_or_give_up(pending, stalled, "BatchGetItem")
        return found

    def write_parts(self, parts: list[Item]) -> None:
        """Write blob parts (idempotent: same key, same bytes), 25 to a request."""
        for start in range(0, len(parts), BATCH_WRITE_ITEMS):
            requests = [{"PutRequest": {"Item": p}} for p in parts[start : start + BATCH_WRITE_ITEMS]]
            pending: dict[str, Any] = {self.name: requests}
            stalled = 0
            while pending:
                before = len(pending[self.name])
                with _errors("BatchWriteItem"):
                    page = self.client.batch_write_item(RequestItems=pending)
                pending = dict(page.get("UnprocessedItems") or {})
                stalled = stalled + 1 if pending and len(pending[self.name]) >= before else 0
                self._wait_or_give_up(pending, stalled, "BatchWriteItem")

    def _wait_or_give_up(self, pending: dict[str, Any], stalled: int, operation: str) -> None:
        if not pending:
            return
        if stalled >= self.max_attempts:
            raise StoreError(f"DynamoDB {operation} left items unprocessed {stalled} times in a row")
        _backoff(stalled)

    def decode(self, item: Item) -> Any:
        """The JSON body of ``item``: inline, or its blob parts read back and verified."""
        found, body = inline(item)
        if found:
            return body
        digest, count = manifest(item)
        return reassemble(digest, count, list(self.query(f"BLOB#{digest}", "PART#")))
