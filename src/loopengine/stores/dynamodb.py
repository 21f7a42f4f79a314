"""DynamoDB adapter for the three store ports: one table, conditional writes, transactions.

The key schema (which record is which item, the sparse index, TTL) is
:mod:`loopengine.stores.dynamodb_items`; the table client (retries, write tokens, transactions)
:mod:`loopengine.stores.dynamodb_table`. The checkpoint and session stores are
:mod:`~loopengine.stores.dynamodb_checkpoints` and :mod:`~loopengine.stores.dynamodb_sessions`;
this module has the turn store and builds the three.

Guarantees, and how:

- A state transition (:meth:`DynamoTurnStore.commit`, :mod:`~loopengine.stores.dynamodb_commit`)
  is one TransactWriteItems, or one PutItem when it writes one item: the turn's head (carrying
  the transition's events, claims and outcomes in its log, :mod:`~loopengine.stores.dynamodb_heads`)
  and/or the checkpoint under their version conditions (creates under ``attribute_not_exists``,
  with one pointer per pendingId), plus its messages and outbox records (plus a BatchWriteItem of
  blob parts first, only for a huge record).
- ``replace``/``replace_turn`` are PutItems conditioned on the stored ``version``; the loser gets
  :class:`~loopengine.domain.base.errors.VersionConflict` carrying the stored record from ALL_OLD, no
  second read (a turn this process holds a later version of is refused without a request).
- An append is one write of one item per new message, each created absent: an item at
  ``expected_len`` already there means the history moved (``DynamoSessionStore.append``).
- A call is claimed at most once: its digest joins the head's ``claimed`` set under
  ``NOT contains`` (a standalone ``start_call``, with its ``CALL#`` item created absent) or under
  the head's version and an unchanged set (a transition's claims). Reads that feed a
  compare-and-set are strongly consistent; only ``list_open``, ``due_turns`` and ``due_outbox``
  (the index) are eventually consistent.
"""

from __future__ import annotations

import dataclasses
from contextlib import suppress
from typing import TYPE_CHECKING

from loopengine.app.ports import Change, Stores
from loopengine.domain.base.clock import Clock
from loopengine.domain.base.errors import AlreadyExists, StoreError
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.idempotency import IdempotencyRecord
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.tokens.metering import DailyUsage
from loopengine.domain.turns import CallRecord, TurnQuery, TurnRecord, TurnStatus
from loopengine.stores import dynamodb_bill as bill
from loopengine.stores.dynamodb_checkpoints import DynamoCheckpointStore
from loopengine.stores.dynamodb_codec import key, n, unsortable
from loopengine.stores.dynamodb_commit import DynamoCommits
from loopengine.stores.dynamodb_heads import (
    EventGroup,
    Head,
    HeadCache,
    TurnLog,
    claim_digest,
    merge_calls,
    merge_events,
)
from loopengine.stores.dynamodb_index import read as read_index
from loopengine.stores.dynamodb_items import OUTBOX_EVENTS, DynamoStore
from loopengine.stores.dynamodb_scan import list_turns
from loopengine.stores.dynamodb_sessions import DynamoSessionStore
from loopengine.stores.dynamodb_table import (
    ABSENT,
    DEFAULT_SHARDS,
    Condition,
    ConditionFailed,
    DynamoTable,
    TransactionCancelled,
    count_requests,
    create_table,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "DynamoCheckpointStore",
    "DynamoSessionStore",
    "DynamoStore",
    "count_requests",
    "create_table",
    "dynamodb_stores",
    "open_dynamodb_stores",
]


class DynamoTurnStore(DynamoCommits):
    """TurnStore on DynamoDB: turns (indexed per session), events, call claims, config snapshots.

    A turn's events and calls ride in its head (:mod:`~loopengine.stores.dynamodb_heads`).
    """

    def __init__(
        self, table: DynamoTable, clock: Clock, ttl_days: int | None = 90, heads: HeadCache | None = None
    ) -> None:
        super().__init__(table, clock, ttl_days, heads)
        self._configs: set[str] = set()
        """Config hashes this store has written or read: stored for good, never put again."""

    def hold_wait(self, holder: str, limit: int, now: float, until: float) -> int | None:
        """Take the first free slot: one conditional PutItem per slot tried (usually one)."""
        for slot in range(limit):
            item = {
                **key(f"WAIT#{holder}", f"SLOT#{slot}"),
                "until": n(int(until) + 1),
                "ttl": n(int(until) + 60),
            }
            free = Condition(
                "attribute_not_exists(pk) OR #until <= :now", {"#until": "until"}, {":now": n(int(now))}
            )
            try:
                self.table.put(item, free)
            except ConditionFailed:
                continue
            return slot
        return None

    def release_wait(self, holder: str, slot: int) -> None:
        """Give a slot back (one DeleteItem)."""
        self.table.delete(f"WAIT#{holder}", f"SLOT#{slot}")

    def get_idempotency(self, key: str) -> IdempotencyRecord | None:
        """The record of a scoped idempotency key (one GetItem)."""
        return self._read(f"IDEM#{key}", "IDEM", IdempotencyRecord.from_dict)

    def create_turn(self, turn: TurnRecord) -> None:
        """Store the turn and its session index entry in one transaction; AlreadyExists if taken."""
        actions, head = self._create_turn_actions(turn)
        try:
            self.table.transact(actions)
        except TransactionCancelled as exc:
            raise AlreadyExists(f"turn {turn.turn_id} exists") from exc
        self.heads.remember(head)

    def get_turn(self, turn_id: str) -> TurnRecord | None:
        """Read a turn."""
        head = self._read_head(turn_id)
        return None if head is None else head.turn

    def replace_turn(self, turn: TurnRecord) -> TurnRecord:
        """Compare-and-set on ``turn.version``; VersionConflict carries the stored record.

        ``session_id`` and ``created_at`` must not change (the session index is written once). The
        same write as a :meth:`commit` of the turn alone (its log and claims stay as they are).
        """
        stored = self.commit(Change(turn.turn_id, turn=turn)).turn
        assert stored is not None
        return stored

    def session_turns(self, session_id: str) -> list[TurnRecord]:
        """Every turn of a session, oldest first: a consistent Query of the index, then BatchGetItem."""
        ids = [i["turnId"]["S"] for i in self.table.query(f"SESSION#{session_id}", "TURN#")]
        found = self.table.batch_get([key(f"TURN#{turn_id}", "TURN") for turn_id in ids])
        turns = {t.turn_id: t for t in (self._turn_of(i) for i in found)}
        return [turns[turn_id] for turn_id in ids if turn_id in turns]

    def session_owner(self, session_id: str) -> tuple[str, str] | None:
        """(tenant, agent) of the session's first turn: a Query of one index entry, which names them."""
        first = next(iter(self.table.query(f"SESSION#{session_id}", "TURN#", Limit=1)), None)
        return None if first is None else (first["tenant"]["S"], first["agent"]["S"])

    def unfinished_session_turns(self, session_id: str) -> list[TurnRecord]:
        """The session's turns that have not finished, oldest first: whatever the session's age.

        A consistent Query of the ``ACTIVE#`` entries, then BatchGetItem of those turns; an entry
        whose turn finished anyway (a crash between a ``replace_turn`` and its delete) is left out
        and dropped.
        """
        ids = [i["turnId"]["S"] for i in self.table.query(f"SESSION#{session_id}", "ACTIVE#")]
        found = self.table.batch_get([key(f"TURN#{turn_id}", "TURN") for turn_id in ids])
        turns = {t.turn_id: t for t in (self._turn_of(i) for i in found)}
        ordered = [turns[turn_id] for turn_id in ids if turn_id in turns]
        for done in (t for t in ordered if t.status is TurnStatus.FINISHED):
            self._drop_active(done)
        return [t for t in ordered if t.status is not TurnStatus.FINISHED]

    def due_turns(self, now: float, limit: int = 100) -> list[TurnRecord]:
        """Turns due at or before ``now``, earliest first (eventually consistent).

        A turn moved on since the index was updated is left out after reading it back.
        """
        items = read_index(self.table, "DUE", below=now, limit=limit)
        found = (self._turn_of(i) for i in items)
        return [t for t in found if t.due_at is not None and t.due_at <= now]

    def due_outbox(self, now: float, limit: int = 100) -> list[OutboxRecord]:
        """Undelivered notifications due at or before ``now``, earliest first (eventually consistent)."""
        items = read_index(self.table, "OUTBOX", below=now, limit=limit)
        found = (OutboxRecord.from_dict(self.table.decode(i)) for i in items)
        return [r for r in found if r.due_at is not None and r.due_at <= now]

    def list_turns(self, query: TurnQuery) -> list[TurnRecord]:
        """The matching turns, newest first: a Scan of the table (:mod:`~loopengine.stores.dynamodb_scan`)."""
        return list_turns(self.table, query, self._turn_of)

    def put_outbox(self, record: OutboxRecord, events: tuple[JsonDict, ...] = ()) -> None:
        """Store a notification's delivery state, ``events`` kept in its item (one PutItem)."""
        self.table.put(self._outbox_item(record, events))

    def add_event(self, turn_id: str, event: JsonDict) -> None:
        """Append one audit event in one PutItem of its own item, ordered by its time.

        Events of one turn come from one writer at a time (its runner or a decider), stamped by
        the clock; equal stamps from this process keep their order through the counter, and the
        random tail keeps two processes from ever writing the same key.
        """
        self.table.put(self._event_item(turn_id, event))

    def events(self, turn_id: str) -> list[JsonDict]:
        """The turn's audit events in the order they were added (one consistent Query of its partition)."""
        groups, _ = self._logs(turn_id)
        return merge_events(groups)

    def _logs(self, turn_id: str) -> tuple[list[EventGroup], list[CallRecord]]:
        """Every event group and call record of the turn: its head's log, its flushed logs, its own items."""
        groups: list[EventGroup] = []
        calls: list[CallRecord] = []
        head: Head | None = None
        for item in self.table.query(f"TURN#{turn_id}"):
            sk = item["sk"]["S"]
            if sk == "TURN":
                head = self._head_of(item)
            elif sk.startswith("LOG#"):
                log = TurnLog.from_dict(self.table.decode(item), turn_id)
                groups += log.groups
                calls += log.calls
            elif sk.startswith("EVENT#"):
                groups.append(_event_group(sk, self.table.decode(item)))
            elif sk.startswith("CALL#"):
                calls.append(CallRecord.from_dict(self.table.decode(item)))
            elif sk.startswith("OUTBOX#") and (kept := self.table.decode(item).get(OUTBOX_EVENTS)):
                groups.append(EventGroup.from_dict(kept))  # a delivery's audit event, kept with it
        if head is not None:
            groups += head.log.groups
            calls += head.log.calls
        return groups, calls

    def start_call(self, call: CallRecord) -> bool:
        """Claim a call on its own: True if this caller claimed it, False if it was claimed before.

        Its record is a ``CALL#`` item created absent; the same transaction adds the call to the
        turn head's ``claimed`` set (unless it is there already), the guard a transition's claims are
        written under.
        """
        item = self._call_item(call)
        found = self.heads.recall(call.turn_id) or self._read_head(call.turn_id)
        digest = claim_digest(call.tool_use_id)
        try:
            if found is None:  # no turn stored under this id: the item alone
                self.table.put(item, ABSENT)
                return True
            guard = {
                "Update": {
                    "TableName": self.table.name,
                    "Key": key(f"TURN#{call.turn_id}", "TURN"),
                    "UpdateExpression": "ADD #claimed :claim",
                    "ConditionExpression": "attribute_exists(pk) AND NOT contains(#claimed, :digest)",
                    "ExpressionAttributeNames": {"#claimed": "claimed"},
                    "ExpressionAttributeValues": {":claim": {"BS": [digest]}, ":digest": {"B": digest}},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
            self.table.transact([guard, self.table.put_action(item, ABSENT)])
        except (ConditionFailed, TransactionCancelled):
            return False
        self.heads.claimed(call.turn_id, digest)
        return True

    def finish_call(self, call: CallRecord) -> None:
        """Record a call's outcome; the started item keeps its ``tool`` and ``startedAt``.

        The start fields never change once written, so the merged put needs no condition; a call
        that was never started is created under ``attribute_not_exists`` (a racing start wins).
        """
        for _ in range(2):
            found = self._read(f"TURN#{call.turn_id}", f"CALL#{call.tool_use_id}", CallRecord.from_dict)
            merged = call
            if found is not None:
                merged = dataclasses.replace(
                    found, outcome=call.outcome, result=call.result, finished_at=call.finished_at
                )
            try:
                self.table.put(self._call_item(merged), None if found else ABSENT)
                return
            except ConditionFailed:
                continue
        raise StoreError(f"call {call.tool_use_id} of turn {call.turn_id} kept changing")

    def calls(self, turn_id: str) -> dict[str, CallRecord]:
        """The turn's call records by toolUseId (an outcome over its claim), in the order they started."""
        _, calls = self._logs(turn_id)
        return merge_calls(calls)

    def daily_usage(self, tenant: str, day: str, agent: str | None = None) -> list[DailyUsage]:
        """What ``tenant``'s agents used on ``day``: its counter shards added up (:mod:`~.dynamodb_bill`)."""
        return bill.daily_usage(self.table, tenant, day, agent)

    def put_config(self, config_hash: str, snapshot: JsonDict) -> None:
        """Store a snapshot under its hash; a second put of the same hash changes nothing.

        A hash this store already wrote or read is stored (snapshots are never changed nor
        deleted), so it costs no request: without that, every turn start would send a put whose
        condition fails.
        """
        if config_hash in self._configs:
            return
        with suppress(ConditionFailed):
            self.table.put(self._item(f"CONFIG#{config_hash}", "CONFIG", snapshot), ABSENT)
        self._configs.add(config_hash)

    def get_config(self, config_hash: str) -> JsonDict | None:
        """Read a snapshot, or None."""
        found = self._read(f"CONFIG#{config_hash}", "CONFIG", dict)
        if found is not None:
            self._configs.add(config_hash)
        return found


def _event_group(sk: str, body: JsonDict | list[JsonDict]) -> EventGroup:
    """The events of an ``EVENT#<t>#<n>#<r>`` item, ordered by the stamp and counter of its key."""
    parts = sk.split("#")
    stamp = unsortable(parts[1]) if len(parts) > 1 and len(parts[1]) == 16 else 0.0
    counter = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0
    return EventGroup(stamp, counter, tuple(body if isinstance(body, list) else [body]))


def dynamodb_stores(table: DynamoTable, clock: Clock, ttl_days: int | None = 90) -> Stores:
    """The three stores on one table."""
    heads = HeadCache()
    return Stores(
        DynamoCheckpointStore(table, clock, ttl_days, heads),
        DynamoSessionStore(table, clock, ttl_days, heads),
        DynamoTurnStore(table, clock, ttl_days, heads),
        clock,
    )


def open_dynamodb_stores(
    table_name: str,
    clock: Clock,
    client: DynamoDBClient | None = None,
    *,
    ttl_days: int | None = 90,
    max_attempts: int = 5,
    index_shards: int = DEFAULT_SHARDS,
) -> Stores:
    """The stores on the table ``table_name``; without ``client`` one is made on first use.

    ``max_attempts`` bounds botocore's ``standard`` retries of a made client (and the adapter's own
    retries of transactions that lost to another transaction); ``index_shards``: see
    :mod:`~loopengine.stores.dynamodb_index` (a count that may only grow).
    """
    table = DynamoTable(table_name, client, max_attempts, shards=index_shards)
    return dynamodb_stores(table, clock, ttl_days)
