"""DynamoDB adapter for the three store ports: one table, conditional writes, transactions.

Key schema (every key is a string; ``<t>`` is :func:`~loopengine.stores.dynamodb_codec.sortable`,
16 hex digits whose string order is the numeric order of a timestamp):

===============  =================  ============================  ===============================
item             pk                 sk                            other attributes
===============  =================  ============================  ===============================
checkpoint       ``CP#<id>``        ``CP``                        version, agent, tenant, body;
                                                                  while open: gsi1pk
                                                                  ``OPEN#<tenant>``,
                                                                  gsi1sk ``<t createdAt>#<id>``;
                                                                  once closed: ttl
pending pointer  ``PENDING#<pid>``  ``PENDING``                   checkpointId
session head     ``SESSION#<sid>``  ``HEAD``                      length (messages stored)
messages         ``SESSION#<sid>``  ``MSG#<seq:010d>``            body: the messages from seq on
                                                                  (one per item unless an append
                                                                  brings more than 99)
session's turn   ``SESSION#<sid>``  ``TURN#<t createdAt>#<tid>``  turnId (write-once index entry)
turn             ``TURN#<tid>``     ``TURN``                      version, body; while something
                                                                  is due: gsi1pk ``DUE``, gsi1sk
                                                                  ``<t dueAt>#<tid>``
audit event      ``TURN#<tid>``     ``EVENT#<t at>#<n>#<r>``      body, ttl (n: this process's
                                                                  event counter, r: 24 random bits)
tool call        ``TURN#<tid>``     ``CALL#<toolUseId>``          body, ttl
notification     ``TURN#<tid>``     ``OUTBOX#<eventId>``          body; while undelivered: gsi1pk
                                                                  ``OUTBOX``, gsi1sk
                                                                  ``<t dueAt>#<eventId>``
config snapshot  ``CONFIG#<hash>``  ``CONFIG``                    body
blob part        ``BLOB#<sha256>``  ``PART#<i:05d>``              part (binary, <= 300 KB)
===============  =================  ============================  ===============================

*body* is ``data`` (the record's JSON) or, past 350 KB, the manifest ``blob`` + ``parts`` (see
:mod:`~loopengine.stores.dynamodb_codec`). ``gsi1`` (keys ``gsi1pk``/``gsi1sk``, projection ALL) is
sparse: only open checkpoints, due turns and undelivered notifications carry its keys, so closing
a checkpoint, a turn with nothing due or a delivered notification drops out of the index. A
tenant's open checkpoints share the partition ``OPEN#<tenant>`` (ordered by creation time), so
``list_open`` can only ever read one tenant's items; it narrows by agent with a FilterExpression.
Due turns share the partition ``DUE`` and notifications ``OUTBOX``, ordered by due time;
``due_turns`` / ``due_outbox`` read the keys below ``<t now>#~`` (no Scan).

Guarantees, and how:

- A state transition (:meth:`DynamoTurnStore.commit`) is one TransactWriteItems: the turn and/or
  checkpoint under their version conditions (creates under ``attribute_not_exists``, with one
  pointer per pendingId), plus its audit events and outbox records (plus a BatchWriteItem of blob
  parts first, only for a huge record).
- ``replace``/``replace_turn`` are PutItems conditioned on the stored ``version``; the loser gets
  :class:`~loopengine.domain.errors.VersionConflict` carrying the stored record from ALL_OLD, no second read.
- An append is one transaction: the head's ``length`` must equal ``expected_len`` and each new
  message item must be absent; the loser learns the current length from the head's ALL_OLD.
- ``start_call`` is a PutItem under ``attribute_not_exists``. Reads that feed a compare-and-set are
  strongly consistent; only ``list_open``, ``due_turns`` and ``due_outbox`` (``gsi1``) are eventually
  consistent.

TTL (``ttl_days``, default 90; ``None`` turns it off) is only housekeeping: audit events, call
records and closed checkpoints get ``ttl = now + ttl_days``. DynamoDB deletes such items up to days
late, so no decision ever depends on it; ``ttl_days`` must outlast any turn that is still open.
Blob parts are never deleted (they may be shared by content).
"""

from __future__ import annotations

import dataclasses
import itertools
import secrets
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any, TypeVar

from loopengine.app.ports import Change, Committed, JsonDict, Stores
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.clock import Clock
from loopengine.domain.errors import AlreadyExists, StoreError, VersionConflict
from loopengine.domain.messages import Message
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.turns import CallRecord, TurnRecord
from loopengine.stores.dynamodb_codec import INLINE_LIMIT, Item, encode, key, n, s, sortable
from loopengine.stores.dynamodb_table import (
    ABSENT,
    TRANSACTION_BUDGET,
    TRANSACTION_ITEMS,
    Condition,
    ConditionFailed,
    DynamoTable,
    TransactionCancelled,
    count_requests,
    create_table,
    version_is,
)

_EVENT_COUNTER = itertools.count(1)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["DynamoStore", "count_requests", "create_table", "dynamodb_stores", "open_dynamodb_stores"]

R = TypeVar("R")
DAY = 86_400


class DynamoStore:
    """What the three stores share: the table, the clock (for ``ttl``) and the body codec."""

    def __init__(self, table: DynamoTable, clock: Clock, ttl_days: int | None = 90) -> None:
        self.table = table
        self.clock = clock
        self.ttl_days = ttl_days

    def _ttl(self) -> Item:
        if self.ttl_days is None:
            return {}
        return {"ttl": n(int(self.clock.now()) + self.ttl_days * DAY)}

    def _item(
        self, pk: str, sk: str, body: Any, attributes: Item | None = None, limit: int = INLINE_LIMIT
    ) -> Item:
        """An item holding ``body``; any blob parts it needs are written now, before it."""
        encoded = encode(body, limit)
        self.table.write_parts(encoded.parts)
        return {**key(pk, sk), **(attributes or {}), **encoded.attributes}

    def _read(self, pk: str, sk: str, parse: Callable[[Any], R]) -> R | None:
        found = self.table.get(pk, sk)
        return parse(self.table.decode(found)) if found else None

    def _compare_and_set(self, item: Item, expected: int, parse: Callable[[JsonDict], R]) -> None:
        try:
            self.table.put(item, version_is(expected))
        except ConditionFailed as lost:
            current = parse(self.table.decode(lost.old)) if lost.old else None
            what = item["pk"]["S"]
            raise VersionConflict(f"{what} is not at version {expected}", current=current) from None


class DynamoCheckpointStore(DynamoStore):
    """CheckpointStore on DynamoDB: a checkpoint item plus one pointer item per pendingId."""

    def create(self, cp: TurnCheckpoint) -> None:
        """Write the checkpoint and its pointers in one transaction; AlreadyExists if any is taken."""
        actions = _create_checkpoint_actions(self, cp)
        try:
            self.table.transact(actions)
        except TransactionCancelled as exc:
            raise AlreadyExists(f"checkpoint {cp.id} or one of its pendingIds exists") from exc

    def get(self, checkpoint_id: str) -> TurnCheckpoint | None:
        """Read by checkpoint id."""
        return self._read(f"CP#{checkpoint_id}", "CP", TurnCheckpoint.from_dict)

    def find_by_pending(self, pending_id: str) -> TurnCheckpoint | None:
        """Follow a pendingId's pointer (closed checkpoints included): two consistent reads."""
        pointer = self.table.get(f"PENDING#{pending_id}", "PENDING")
        return self.get(pointer["checkpointId"]["S"]) if pointer else None

    def replace(self, cp: TurnCheckpoint) -> TurnCheckpoint:
        """Compare-and-set on ``cp.version``; VersionConflict carries the stored record or None."""
        stored = dataclasses.replace(cp, version=cp.version + 1)
        self._compare_and_set(self._checkpoint_item(stored), cp.version, TurnCheckpoint.from_dict)
        return stored

    def list_open(self, tenant: str, agent: str | None = None) -> list[TurnCheckpoint]:
        """Open checkpoints of ``tenant``, oldest first: its own index partition (eventually consistent)."""
        extra: dict[str, Any] = {}
        if agent is not None:
            extra = {"FilterExpression": "#agent = :agent", "names": {"#agent": "agent"}}
            extra["values"] = {":agent": s(agent)}
        found = [
            TurnCheckpoint.from_dict(self.table.decode(i))
            for i in self.table.query(f"OPEN#{tenant}", index=True, **extra)
        ]
        return [cp for cp in found if not cp.closed]

    def _checkpoint_item(self, cp: TurnCheckpoint) -> Item:
        return _checkpoint_item(self, cp)


def _checkpoint_item(store: DynamoStore, cp: TurnCheckpoint) -> Item:
    listed = {"gsi1pk": s(f"OPEN#{cp.tenant}"), "gsi1sk": s(f"{sortable(cp.created_at)}#{cp.id}")}
    listed = {} if cp.closed else listed
    ttl = store._ttl() if cp.closed else {}
    attributes = {"version": n(cp.version), "agent": s(cp.agent), "tenant": s(cp.tenant)}
    return store._item(f"CP#{cp.id}", "CP", cp.to_dict(), {**attributes, **listed, **ttl})


def _create_checkpoint_actions(store: DynamoStore, cp: TurnCheckpoint) -> list[dict[str, Any]]:
    if len(cp.outstanding) >= TRANSACTION_ITEMS - 10:
        raise StoreError(f"a checkpoint holds at most {TRANSACTION_ITEMS - 11} pending items here")
    pointers = [
        {**key(f"PENDING#{pending_id}", "PENDING"), "checkpointId": s(cp.id)} for pending_id in cp.outstanding
    ]
    return [store.table.put_action(item, ABSENT) for item in (_checkpoint_item(store, cp), *pointers)]


class DynamoSessionStore(DynamoStore):
    """SessionStore on DynamoDB: a head item holding the length, then the messages in order."""

    def load(self, session_id: str) -> list[Message]:
        """The whole history in order (a paginated, strongly consistent Query)."""
        history: list[Message] = []
        for item in self.table.query(f"SESSION#{session_id}", "MSG#"):
            history.extend(Message.from_dict(m) for m in self.table.decode(item))
        return history

    def append(self, session_id: str, messages: list[Message], expected_len: int) -> None:
        """Append iff the history has ``expected_len`` messages; VersionConflict(current=length).

        One transaction: the head moves from ``expected_len`` to the new length and every new
        message item must be absent, so two appenders can never both land.
        """
        try:
            self.table.transact(_append_actions(self, session_id, messages, expected_len))
        except TransactionCancelled as lost:
            raise _append_conflict(lost, 0, session_id, expected_len) from None


def _append_actions(
    store: DynamoStore, session_id: str, messages: Sequence[Message], expected_len: int
) -> list[dict[str, Any]]:
    """The head moves from ``expected_len`` to the new length; every new message item is absent."""
    pk = f"SESSION#{session_id}"
    size = -(-len(messages) // (TRANSACTION_ITEMS - 11)) or 1  # messages per item: 1 unless > 89
    groups = [messages[i : i + size] for i in range(0, len(messages), size)]
    limit = min(INLINE_LIMIT, TRANSACTION_BUDGET // 2 // max(len(groups), 1))
    head = {**key(pk, "HEAD"), "length": n(expected_len + len(messages))}
    at_expected = Condition(
        "#length = :expected" if expected_len else "attribute_not_exists(pk) OR #length = :expected",
        {"#length": "length"},
        {":expected": n(expected_len)},
    )
    actions = [store.table.put_action(head, at_expected)]
    seq = expected_len
    for group in groups:
        item = store._item(pk, f"MSG#{seq:010d}", [m.to_dict() for m in group], limit=limit)
        actions.append(store.table.put_action(item, ABSENT))
        seq += len(group)
    return actions


def _append_conflict(lost: TransactionCancelled, head: int, session_id: str, expected_len: int) -> Exception:
    if not lost.failed(head):
        return StoreError(f"session {session_id}: messages exist past the head")
    old = lost.old(head)
    current = int(old["length"]["N"]) if old else 0
    return VersionConflict(
        f"session {session_id} has {current} messages, not {expected_len}", current=current
    )


class DynamoTurnStore(DynamoStore):
    """TurnStore on DynamoDB: turns (indexed per session), events, call claims, config snapshots."""

    def commit(self, change: Change) -> Committed:
        """One TransactWriteItems for the whole transition (see :class:`~loopengine.app.ports.Change`).

        A failed version condition becomes VersionConflict carrying that record's ALL_OLD; a taken
        create key becomes AlreadyExists.
        """
        actions: list[dict[str, Any]] = []
        parsers: list[Callable[[JsonDict], Any] | None] = []
        turn: TurnRecord | None = None
        cp: TurnCheckpoint | None = None
        if change.new_turn is not None:
            turn = change.new_turn
            created = self._create_turn_actions(turn)
            actions += created
            parsers += [None] * len(created)
        if change.turn is not None:
            turn = dataclasses.replace(change.turn, version=change.turn.version + 1)
            actions.append(self.table.put_action(self._turn_item(turn), version_is(change.turn.version)))
            parsers.append(TurnRecord.from_dict)
        if change.new_checkpoint is not None:
            cp = change.new_checkpoint
            created = _create_checkpoint_actions(self, cp)
            actions += created
            parsers += [None] * len(created)
        if change.checkpoint is not None:
            cp = dataclasses.replace(change.checkpoint, version=change.checkpoint.version + 1)
            expected = version_is(change.checkpoint.version)
            actions.append(self.table.put_action(_checkpoint_item(self, cp), expected))
            parsers.append(TurnCheckpoint.from_dict)
        head = -1
        if change.append is not None:
            add = change.append
            head = len(actions)
            appended = _append_actions(self, add.session_id, add.messages, add.expected_len)
            actions += appended
            parsers += [None] * len(appended)
        for event in change.events:
            actions.append(self.table.put_action(self._event_item(change.turn_id, event), ABSENT))
            parsers.append(None)
        for record in change.outbox:
            actions.append(self.table.put_action(self._outbox_item(record), ABSENT))
            parsers.append(None)
        if len(actions) > TRANSACTION_ITEMS:
            raise StoreError(
                f"a state change of turn {change.turn_id} needs more than {TRANSACTION_ITEMS} items"
            )
        try:
            self.table.transact(actions)
        except TransactionCancelled as lost:
            if head >= 0 and change.append is not None and lost.failed(head):
                raise _append_conflict(
                    lost, head, change.append.session_id, change.append.expected_len
                ) from None
            for index, parse in enumerate(parsers):
                if lost.failed(index) and parse is not None:
                    old = lost.old(index)
                    current = parse(self.table.decode(old)) if old else None
                    raise VersionConflict(
                        f"turn {change.turn_id}: a record changed", current=current
                    ) from None
            raise AlreadyExists(f"turn {change.turn_id}: a record to create exists") from lost
        return Committed(turn, cp)

    def create_turn(self, turn: TurnRecord) -> None:
        """Store the turn and its session index entry in one transaction; AlreadyExists if taken."""
        try:
            self.table.transact(self._create_turn_actions(turn))
        except TransactionCancelled as exc:
            raise AlreadyExists(f"turn {turn.turn_id} exists") from exc

    def _create_turn_actions(self, turn: TurnRecord) -> list[dict[str, Any]]:
        index = key(f"SESSION#{turn.session_id}", f"TURN#{sortable(turn.created_at)}#{turn.turn_id}")
        items = (self._turn_item(turn), {**index, "turnId": s(turn.turn_id)})
        return [self.table.put_action(item, ABSENT) for item in items]

    def get_turn(self, turn_id: str) -> TurnRecord | None:
        """Read a turn."""
        return self._read(f"TURN#{turn_id}", "TURN", TurnRecord.from_dict)

    def replace_turn(self, turn: TurnRecord) -> TurnRecord:
        """Compare-and-set on ``turn.version``; VersionConflict carries the stored record.

        ``session_id`` and ``created_at`` must not change (the session index is written once).
        """
        stored = dataclasses.replace(turn, version=turn.version + 1)
        self._compare_and_set(self._turn_item(stored), turn.version, TurnRecord.from_dict)
        return stored

    def session_turns(self, session_id: str) -> list[TurnRecord]:
        """Every turn of a session, oldest first: a consistent Query of the index, then BatchGetItem."""
        ids = [i["turnId"]["S"] for i in self.table.query(f"SESSION#{session_id}", "TURN#")]
        found = self.table.batch_get([key(f"TURN#{turn_id}", "TURN") for turn_id in ids])
        turns = {t.turn_id: t for t in (TurnRecord.from_dict(self.table.decode(i)) for i in found)}
        return [turns[turn_id] for turn_id in ids if turn_id in turns]

    def due_turns(self, now: float, limit: int = 100) -> list[TurnRecord]:
        """Turns due at or before ``now``, earliest first (eventually consistent).

        A turn moved on since the index was updated is left out after reading it back.
        """
        items = self.table.query("DUE", index=True, below=f"{sortable(now)}#~", Limit=limit)
        found = (TurnRecord.from_dict(self.table.decode(i)) for i in items)
        due = (t for t in found if t.due_at is not None and t.due_at <= now)
        return list(itertools.islice(due, limit))

    def due_outbox(self, now: float, limit: int = 100) -> list[OutboxRecord]:
        """Undelivered notifications due at or before ``now``, earliest first (eventually consistent)."""
        items = self.table.query("OUTBOX", index=True, below=f"{sortable(now)}#~", Limit=limit)
        found = (OutboxRecord.from_dict(self.table.decode(i)) for i in items)
        due = (r for r in found if r.due_at is not None and r.due_at <= now)
        return list(itertools.islice(due, limit))

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

    def _event_item(self, turn_id: str, event: JsonDict) -> Item:
        at = event.get("at")
        stamp = float(at) if isinstance(at, int | float) else self.clock.now()
        sk = f"EVENT#{sortable(stamp)}#{next(_EVENT_COUNTER):012d}#{secrets.token_hex(3)}"
        return self._item(f"TURN#{turn_id}", sk, event, self._ttl())

    def _outbox_item(self, record: OutboxRecord) -> Item:
        listed: Item = {}
        if record.due_at is not None:
            listed = {"gsi1pk": s("OUTBOX"), "gsi1sk": s(f"{sortable(record.due_at)}#{record.event_id}")}
        ttl = self._ttl() if record.due_at is None else {}
        sk = f"OUTBOX#{record.event_id}"
        return self._item(f"TURN#{record.turn_id}", sk, record.to_dict(), {**listed, **ttl})

    def events(self, turn_id: str) -> list[JsonDict]:
        """The turn's audit events in the order they were added."""
        return [self.table.decode(i) for i in self.table.query(f"TURN#{turn_id}", "EVENT#")]

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
        """Store a snapshot under its hash; a second put of the same hash changes nothing."""
        with suppress(ConditionFailed):
            self.table.put(self._item(f"CONFIG#{config_hash}", "CONFIG", snapshot), ABSENT)

    def get_config(self, config_hash: str) -> JsonDict | None:
        """Read a snapshot, or None."""
        return self._read(f"CONFIG#{config_hash}", "CONFIG", dict)

    def _turn_item(self, turn: TurnRecord) -> Item:
        attributes = {"version": n(turn.version)}
        if turn.due_at is not None:  # a put replaces the whole item: otherwise unlisted
            listed = f"{sortable(turn.due_at)}#{turn.turn_id}"
            attributes |= {"gsi1pk": s("DUE"), "gsi1sk": s(listed)}
        return self._item(f"TURN#{turn.turn_id}", "TURN", turn.to_dict(), attributes)

    def _call_item(self, call: CallRecord) -> Item:
        return self._item(f"TURN#{call.turn_id}", f"CALL#{call.tool_use_id}", call.to_dict(), self._ttl())


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
) -> Stores:
    """The stores on the table ``table_name``; without ``client`` one is made on first use.

    ``max_attempts`` bounds botocore's ``standard`` retries of a made client (and the adapter's own
    retries of transactions that lost to another transaction).
    """
    return dynamodb_stores(DynamoTable(table_name, client, max_attempts), clock, ttl_days)
