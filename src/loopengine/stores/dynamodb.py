"""DynamoDB adapter for the three store ports: one table, conditional writes, transactions.

The key schema (which record is which item, the sparse index, TTL) is
:mod:`loopengine.stores.dynamodb_items`; the table client (retries, write tokens, transactions)
:mod:`loopengine.stores.dynamodb_table`. The checkpoint and session stores are
:mod:`~loopengine.stores.dynamodb_checkpoints` and :mod:`~loopengine.stores.dynamodb_sessions`;
this module has the turn store and builds the three.

Guarantees, and how:

- A state transition (:meth:`DynamoTurnStore.commit`) is one TransactWriteItems: the turn and/or
  checkpoint under their version conditions (creates under ``attribute_not_exists``, with one
  pointer per pendingId), plus its audit events and outbox records (plus a BatchWriteItem of blob
  parts first, only for a huge record).
- ``replace``/``replace_turn`` are PutItems conditioned on the stored ``version``; the loser gets
  :class:`~loopengine.domain.errors.VersionConflict` carrying the stored record from ALL_OLD, no second read.
- An append is one transaction of one item per new message, each created absent: an item at
  ``expected_len`` already there means the history moved (``DynamoSessionStore.append``).
- ``start_call`` is a PutItem under ``attribute_not_exists``. Reads that feed a compare-and-set are
  strongly consistent; only ``list_open``, ``due_turns`` and ``due_outbox`` (the index) are eventually
  consistent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from loopengine.app.ports import Change, Committed, Stores
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.clock import Clock
from loopengine.domain.errors import AlreadyExists, StoreError, VersionConflict
from loopengine.domain.idempotency import IdempotencyRecord
from loopengine.domain.jsontypes import JsonDict
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.turns import CallRecord, TurnRecord, TurnStatus
from loopengine.stores.dynamodb_checkpoints import DynamoCheckpointStore
from loopengine.stores.dynamodb_codec import key, n
from loopengine.stores.dynamodb_index import read as read_index
from loopengine.stores.dynamodb_items import Action, DynamoStore, append_conflict
from loopengine.stores.dynamodb_sessions import DynamoSessionStore
from loopengine.stores.dynamodb_table import (
    ABSENT,
    DEFAULT_SHARDS,
    TRANSACTION_ITEMS,
    Condition,
    ConditionFailed,
    DynamoTable,
    TransactionCancelled,
    count_requests,
    create_table,
    version_is,
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


@dataclass
class _Plan:
    """One commit's actions and, per action, how to parse the record a failed version condition returns."""

    actions: list[Action] = field(default_factory=list)
    parsers: list[Callable[[JsonDict], Any] | None] = field(default_factory=list)
    head: int = -1
    """Where the append's first message action is, when the commit appends messages."""
    appended: int = 0
    """How many message actions it has."""

    def add(self, actions: list[Action], parse: Callable[[JsonDict], Any] | None = None) -> None:
        """Append ``actions``, each read back on failure with ``parse`` (None: a create)."""
        self.actions += actions
        self.parsers += [parse] * len(actions)


class DynamoTurnStore(DynamoStore):
    """TurnStore on DynamoDB: turns (indexed per session), events, call claims, config snapshots."""

    def __init__(self, table: DynamoTable, clock: Clock, ttl_days: int | None = 90) -> None:
        super().__init__(table, clock, ttl_days)
        self._configs: set[str] = set()
        """Config hashes this store has written or read: stored for good, never put again."""

    def commit(self, change: Change) -> Committed:
        """One TransactWriteItems for the whole transition (see :class:`~loopengine.app.ports.Change`).

        A failed version condition becomes VersionConflict carrying that record's ALL_OLD; a taken
        create key becomes AlreadyExists.
        """
        plan, turn, cp = self._plan(change)
        if len(plan.actions) > TRANSACTION_ITEMS:
            raise StoreError(
                f"a state change of turn {change.turn_id} needs more than {TRANSACTION_ITEMS} items"
            )
        try:
            self.table.transact(plan.actions)
        except TransactionCancelled as lost:
            self._lost(lost, change, plan)
        return Committed(turn, cp)

    def _plan(self, change: Change) -> tuple[_Plan, TurnRecord | None, TurnCheckpoint | None]:
        """The transaction's actions, and the turn and checkpoint as they will be stored."""
        plan = _Plan()
        turn: TurnRecord | None = None
        cp: TurnCheckpoint | None = None
        if change.new_turn is not None:
            plan.add(self._create_turn_actions(turn := change.new_turn))
        if change.turn is not None:
            turn = dataclasses.replace(change.turn, version=change.turn.version + 1)
            expected = version_is(change.turn.version)
            plan.add([self.table.put_action(self._turn_item(turn), expected)], TurnRecord.from_dict)
            if turn.status is TurnStatus.FINISHED:  # its ACTIVE# entry goes in the same write
                plan.add([self._unlist_action(turn)])
        if change.new_checkpoint is not None:
            plan.add(self._create_checkpoint_actions(cp := change.new_checkpoint))
        if change.checkpoint is not None:
            cp = dataclasses.replace(change.checkpoint, version=change.checkpoint.version + 1)
            expected = version_is(change.checkpoint.version)
            plan.add([self.table.put_action(self._checkpoint_item(cp), expected)], TurnCheckpoint.from_dict)
        if change.append is not None:
            add = change.append
            plan.head = len(plan.actions)
            plan.add(appended := self._append_actions(add.session_id, add.messages, add.expected_len))
            plan.appended = len(appended)
        if change.events:  # one item for all of a transition's events
            events = list(change.events) if len(change.events) > 1 else change.events[0]
            plan.add([self.table.put_action(self._event_item(change.turn_id, events), ABSENT)])
        for record in change.outbox:
            plan.add([self.table.put_action(self._outbox_item(record), ABSENT)])
        if change.idempotency is not None:
            plan.add([self._key_action(change.idempotency)])
        plan.add([self.table.put_action(self._call_item(c), ABSENT) for c in change.claims])
        plan.add([{"Put": {"TableName": self.table.name, "Item": self._call_item(c)}} for c in change.calls])
        return plan, turn, cp

    def _key_action(self, record: IdempotencyRecord) -> Action:
        """Create the key's item unless an unexpired one holds it (``ttl`` lets DynamoDB drop it later)."""
        item = self._item(f"IDEM#{record.key}", "IDEM", record.to_dict(), {"ttl": n(int(record.expires_at))})
        free = Condition(
            "attribute_not_exists(pk) OR #ttl <= :now", {"#ttl": "ttl"}, {":now": n(int(record.created_at))}
        )
        return self.table.put_action(item, free)

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

    def _lost(self, lost: TransactionCancelled, change: Change, plan: _Plan) -> NoReturn:
        """Raise what a cancelled commit means: the first failed condition decides."""
        if plan.head >= 0 and any(lost.failed(i) for i in range(plan.head, plan.head + plan.appended)):
            add = change.append
            assert add is not None
            raise append_conflict(lost, plan.head, plan.appended, add.session_id, add.expected_len) from None
        for index, parse in enumerate(plan.parsers):
            if lost.failed(index) and parse is not None:
                old = lost.old(index)
                current = parse(self.table.decode(old)) if old else None
                raise VersionConflict(f"turn {change.turn_id}: a record changed", current=current) from None
        raise AlreadyExists(f"turn {change.turn_id}: a record to create exists") from lost

    def create_turn(self, turn: TurnRecord) -> None:
        """Store the turn and its session index entry in one transaction; AlreadyExists if taken."""
        try:
            self.table.transact(self._create_turn_actions(turn))
        except TransactionCancelled as exc:
            raise AlreadyExists(f"turn {turn.turn_id} exists") from exc

    def get_turn(self, turn_id: str) -> TurnRecord | None:
        """Read a turn."""
        return self._read(f"TURN#{turn_id}", "TURN", TurnRecord.from_dict)

    def replace_turn(self, turn: TurnRecord) -> TurnRecord:
        """Compare-and-set on ``turn.version``; VersionConflict carries the stored record.

        ``session_id`` and ``created_at`` must not change (the session index is written once).
        """
        stored = dataclasses.replace(turn, version=turn.version + 1)
        self._compare_and_set(self._turn_item(stored), turn.version, TurnRecord.from_dict)
        if stored.status is TurnStatus.FINISHED:
            self._drop_active(stored)
        return stored

    def session_turns(self, session_id: str) -> list[TurnRecord]:
        """Every turn of a session, oldest first: a consistent Query of the index, then BatchGetItem."""
        ids = [i["turnId"]["S"] for i in self.table.query(f"SESSION#{session_id}", "TURN#")]
        found = self.table.batch_get([key(f"TURN#{turn_id}", "TURN") for turn_id in ids])
        turns = {t.turn_id: t for t in (TurnRecord.from_dict(self.table.decode(i)) for i in found)}
        return [turns[turn_id] for turn_id in ids if turn_id in turns]

    def session_owner(self, session_id: str) -> tuple[str, str] | None:
        """(tenant, agent) of the session's first turn: a Query of one index entry.

        An entry written before entries named them costs a read of its turn too.
        """
        first = next(iter(self.table.query(f"SESSION#{session_id}", "TURN#", Limit=1)), None)
        if first is None:
            return None
        if "tenant" in first and "agent" in first:
            return first["tenant"]["S"], first["agent"]["S"]
        turn = self.get_turn(first["turnId"]["S"])
        return None if turn is None else (turn.tenant, turn.agent)

    def unfinished_session_turns(self, session_id: str) -> list[TurnRecord]:
        """The session's turns that have not finished, oldest first: whatever the session's age.

        A consistent Query of the ``ACTIVE#`` entries, then BatchGetItem of those turns; an entry
        whose turn finished anyway (a crash between a ``replace_turn`` and its delete) is left out
        and dropped.
        """
        ids = [i["turnId"]["S"] for i in self.table.query(f"SESSION#{session_id}", "ACTIVE#")]
        found = self.table.batch_get([key(f"TURN#{turn_id}", "TURN") for turn_id in ids])
        turns = {t.turn_id: t for t in (TurnRecord.from_dict(self.table.decode(i)) for i in found)}
        ordered = [turns[turn_id] for turn_id in ids if turn_id in turns]
        for done in (t for t in ordered if t.status is TurnStatus.FINISHED):
            self._drop_active(done)
        return [t for t in ordered if t.status is not TurnStatus.FINISHED]

    def due_turns(self, now: float, limit: int = 100) -> list[TurnRecord]:
        """Turns due at or before ``now``, earliest first (eventually consistent).

        A turn moved on since the index was updated is left out after reading it back.
        """
        items = read_index(self.table, "DUE", below=now, limit=limit)
        found = (TurnRecord.from_dict(self.table.decode(i)) for i in items)
        return [t for t in found if t.due_at is not None and t.due_at <= now]

    def due_outbox(self, now: float, limit: int = 100) -> list[OutboxRecord]:
        """Undelivered notifications due at or before ``now``, earliest first (eventually consistent)."""
        items = read_index(self.table, "OUTBOX", below=now, limit=limit)
        found = (OutboxRecord.from_dict(self.table.decode(i)) for i in items)
        return [r for r in found if r.due_at is not None and r.due_at <= now]

    def put_outbox(self, record: OutboxRecord) -> None:
        """Store a notification's delivery state (one PutItem)."""
        self.table.put(self._outbox_item(record))

    def add_event(self, turn_id: str, event: JsonDict) -> None:
        """Append one audit event in one PutItem, ordered by its time.

        Events of one turn come from one writer at a time (its runner or a decider), stamped by
        the clock; equal stamps from this process keep their order through the counter, and the
        random tail keeps two processes from ever writing the same key.
        """
        self.table.put(self._event_item(turn_id, event))

    def events(self, turn_id: str) -> list[JsonDict]:
        """The turn's audit events in the order they were added (a transition's list flattened)."""
        found: list[JsonDict] = []
        for item in self.table.query(f"TURN#{turn_id}", "EVENT#"):
            body = self.table.decode(item)
            found.extend(body if isinstance(body, list) else [body])
        return found

    def start_call(self, call: CallRecord) -> bool:
        """Claim a call: True if this caller created its item, False if it was already there."""
        try:
            self.table.put(self._call_item(call), ABSENT)
        except ConditionFailed:
            return False
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
        """The turn's call records by toolUseId, in the order they were started."""
        items = self.table.query(f"TURN#{turn_id}", "CALL#")
        records = sorted((CallRecord.from_dict(self.table.decode(i)) for i in items), key=_started)
        return {record.tool_use_id: record for record in records}

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


def _started(call: CallRecord) -> float:
    return call.started_at


def dynamodb_stores(table: DynamoTable, clock: Clock, ttl_days: int | None = 90) -> Stores:
    """The three stores on one table."""
    return Stores(
        DynamoCheckpointStore(table, clock, ttl_days),
        DynamoSessionStore(table, clock, ttl_days),
        DynamoTurnStore(table, clock, ttl_days),
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
