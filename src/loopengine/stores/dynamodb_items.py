"""How each record of the DynamoDB stores is laid out as items of the one table.

Key schema (every key is a string; ``<t>`` is :func:`~loopengine.stores.dynamodb_codec.sortable`,
16 hex digits whose string order is the numeric order of a timestamp; ``<n>`` an index shard):

===============  =================  ============================  ===============================
item             pk                 sk                            other attributes
===============  =================  ============================  ===============================
checkpoint       ``CP#<id>``        ``CP``                        version, agent, tenant, body;
                                                                  while open: gsi1pk
                                                                  ``OPEN#<tenant>#<n>``,
                                                                  gsi1sk ``<t createdAt>#<id>``;
                                                                  once closed: ttl
pending pointer  ``PENDING#<pid>``  ``PENDING``                   checkpointId, turnId
messages         ``SESSION#<sid>``  ``MSG#<seq:010d>``            body: the messages from seq on
                                                                  (one per item unless an append
                                                                  brings more than 89), created
                                                                  absent: the append's guard
session's turn   ``SESSION#<sid>``  ``TURN#<t createdAt>#<tid>``  turnId, tenant, agent (write-once)
unfinished turn  ``SESSION#<sid>``  ``ACTIVE#<t createdAt>#<tid>`` turnId (created with the turn,
                                                                  deleted by the write that
                                                                  finishes it)
turn (head)      ``TURN#<tid>``     ``TURN``                      version, body (the turn and the
                                                                  log of its latest transitions),
                                                                  claimed; while something is
                                                                  due: gsi1pk ``DUE#<n>``,
                                                                  gsi1sk ``<t dueAt>#<tid>``
flushed log      ``TURN#<tid>``     ``LOG#<version:012d>``        body (a log the head held)
audit events     ``TURN#<tid>``     ``EVENT#<t at>#<n>#<r>``      body (an event, or the list of
                                                                  one transition's events), ttl
                                                                  (n: this process's event
                                                                  counter, r: 24 random bits):
                                                                  events written on their own
tool call        ``TURN#<tid>``     ``CALL#<toolUseId>``          body, ttl: a call claimed or
                                                                  finished on its own
notification     ``TURN#<tid>``     ``OUTBOX#<key>``              body (with its first delivery's
                                                                  audit event); while undelivered:
                                                                  gsi1pk ``OUTBOX#<n>``, gsi1sk
                                                                  ``<t dueAt>#<key>`` (one per
                                                                  target; key: ``<eventId>#<t>``)
config snapshot  ``CONFIG#<hash>``  ``CONFIG``                    body (put in the transaction that
                                                                  creates a turn, by a process that
                                                                  does not know it stored)
blob part        ``BLOB#<sha256>``  ``PART#<i:05d>``              part (binary, <= 300 KB)
===============  =================  ============================  ===============================

Usage counters and compactions: :mod:`~loopengine.stores.dynamodb_bill`.

A transition's events, claims and outcomes ride in the turn's head, flushed to a ``LOG#`` item
when the head would pass a KB (:mod:`~loopengine.stores.dynamodb_heads`).

*body* is ``data`` (the record's JSON), ``z1`` (that JSON compressed with a preset dictionary,
for bodies over 400 bytes that it shrinks) or, past 350 KB, the manifest ``blob`` + ``parts``
(see :mod:`~loopengine.stores.dynamodb_codec`).
The index (keys ``gsi1pk``/``gsi1sk``, projecting only
``agent``) is sparse: only open checkpoints, due turns and undelivered notifications carry its
keys, so closing a checkpoint, a turn with nothing due or a delivered notification drops out of
it. Each family is spread over index shards (``<n>``: a stable hash of the record's id) and read
shard by shard, merged in time order: see :mod:`~loopengine.stores.dynamodb_index`. A tenant's open
checkpoints are under their own keys ``OPEN#<tenant>#<n>``, so ``list_open`` only ever reads that
tenant's entries; it narrows by agent with a FilterExpression on the projected ``agent``.

A turn's ``dueAt`` is when the sweep should look at it, which a lease renewal leaves alone
(:mod:`loopengine.domain.turn_state`): the entry moves only when the turn enters or leaves the
due set or its due time changes otherwise, so a heartbeat is one turn write and no index write.

TTL (``ttl_days``, default 90; ``None`` turns it off) is only housekeeping: events and call
records written as items of their own, and closed checkpoints get ``ttl = now + ttl_days`` (a
turn's head and flushed logs stay with the turn). DynamoDB deletes such items up to days late, so
no decision ever depends on it; ``ttl_days`` must outlast any turn that is still open.
Blob parts are never deleted (they may be shared by content).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from loopengine.domain.base.clock import Clock
from loopengine.domain.base.errors import StoreError, VersionConflict
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.messages import Message
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.turns import CallRecord, TurnRecord, TurnStatus
from loopengine.stores import dynamodb_index as index
from loopengine.stores.dynamodb_codec import INLINE_LIMIT, Item, encode, key, n, s, sortable
from loopengine.stores.dynamodb_heads import HEAD_BUDGET, EventGroup, Head, HeadCache, TurnLog, item_size
from loopengine.stores.dynamodb_table import (
    ABSENT,
    TRANSACTION_BUDGET,
    TRANSACTION_ITEMS,
    Condition,
    ConditionFailed,
    DynamoTable,
    TransactionCancelled,
    version_is,
)

OUTBOX_EVENTS = "auditEvents"
"""Where a notification's item keeps the audit events of its delivery (read with the turn's events)."""
MAX_APPEND = TRANSACTION_ITEMS - 11
"""Messages one append may store (each is an item of the append's transaction, beside the turn's)."""

R = TypeVar("R")
DAY = 86_400
Action = dict[str, Any]


class DynamoStore:
    """What the three stores share: the table, the clock (for ``ttl``), the body codec, the items.

    ``heads``: the turn heads this process read or wrote (:mod:`~loopengine.stores.dynamodb_heads`),
    one cache for the stores of one table.
    """

    def __init__(
        self, table: DynamoTable, clock: Clock, ttl_days: int | None = 90, heads: HeadCache | None = None
    ) -> None:
        self.table = table
        self.clock = clock
        self.ttl_days = ttl_days
        self.heads = heads if heads is not None else HeadCache()

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

    def _checkpoint_item(self, cp: TurnCheckpoint) -> Item:
        listed = index.entry(f"OPEN#{cp.tenant}", cp.id, cp.created_at, self.table.shards)
        listed = {} if cp.closed else listed
        ttl = self._ttl() if cp.closed else {}
        attributes = {"version": n(cp.version), "agent": s(cp.agent), "tenant": s(cp.tenant)}
        return self._item(f"CP#{cp.id}", "CP", cp.to_dict(), {**attributes, **listed, **ttl})

    def _create_checkpoint_actions(self, cp: TurnCheckpoint) -> list[Action]:
        if len(cp.outstanding) >= TRANSACTION_ITEMS - 10:
            raise StoreError(f"a checkpoint holds at most {TRANSACTION_ITEMS - 11} pending items here")
        pointers = [
            {**key(f"PENDING#{pending_id}", "PENDING"), "checkpointId": s(cp.id), "turnId": s(cp.turn_id)}
            for pending_id in cp.outstanding
        ]
        return [self.table.put_action(item, ABSENT) for item in (self._checkpoint_item(cp), *pointers)]

    def _append_actions(
        self, session_id: str, messages: Sequence[Message], expected_len: int
    ) -> list[Action]:
        """New message items, each created absent: ``MSG#<expected_len>`` existing is the conflict.

        Messages are never deleted and an append's items start at its ``expected_len``, so a history
        read with ``expected_len`` messages has moved iff ``MSG#<expected_len>`` exists: no head item.
        One message per item, unless an append brings more than :data:`MAX_APPEND` (then they are
        grouped, still one transaction; a reader's length always falls between groups).
        """
        pk = f"SESSION#{session_id}"
        size = -(-len(messages) // MAX_APPEND) or 1  # messages per item
        groups = [messages[i : i + size] for i in range(0, len(messages), size)]
        limit = min(INLINE_LIMIT, TRANSACTION_BUDGET // 2 // max(len(groups), 1))
        actions, seq = [], expected_len
        for group in groups:
            item = self._item(pk, f"MSG#{seq:010d}", [m.to_dict() for m in group], limit=limit)
            actions.append(self.table.put_action(item, ABSENT))
            seq += len(group)
        return actions

    def _create_turn_actions(
        self, turn: TurnRecord, log: TurnLog | None = None, claimed: frozenset[bytes] = frozenset()
    ) -> tuple[list[Action], Head]:
        """Create the head (with ``log``), the session's entry and its active entry; the head as stored."""
        index = key(f"SESSION#{turn.session_key}", f"TURN#{sortable(turn.created_at)}#{turn.turn_id}")
        owner = {"tenant": s(turn.tenant), "agent": s(turn.agent)}  # the session's owner, for session_owner
        actions, head = self._head_actions(Head(turn, log or TurnLog(), claimed), ABSENT)
        items = [{**index, "turnId": s(turn.turn_id), **owner}]
        if turn.status is not TurnStatus.FINISHED:
            items.append({**active_key(turn), "turnId": s(turn.turn_id)})
        return actions + [self.table.put_action(item, ABSENT) for item in items], head

    def _read_head(self, turn_id: str) -> Head | None:
        """The stored head of ``turn_id`` (one consistent GetItem), or None."""
        found = self.table.get(f"TURN#{turn_id}", "TURN")
        return None if found is None else self._head_of(found)

    def _head_of(self, item: Item) -> Head:
        """The head a stored turn item holds (remembered for the next commit of its turn)."""
        head = Head.parse(self.table.decode(item), item)
        self.heads.remember(head)
        return head

    def _turn_of(self, item: Item) -> TurnRecord:
        """The turn a stored turn item holds."""
        return self._head_of(item).turn

    def _head_actions(self, head: Head, condition: Condition) -> tuple[list[Action], Head]:
        """Put ``head`` under ``condition``; past :data:`HEAD_BUDGET` bytes its log moves to a ``LOG#`` item.

        Returns the actions and the head as they store it.
        """
        item = self._head_item(head)
        if not head.log or item_size(item) <= HEAD_BUDGET:
            return [self.table.put_action(item, condition)], head
        turn = head.turn
        body = head.log.to_dict()
        flushed = self._item(f"TURN#{turn.turn_id}", f"LOG#{turn.version:012d}", body)  # kept with the turn
        kept = Head(turn, TurnLog(), head.claimed)
        put = self.table.put_action(self._head_item(kept), condition)
        return [put, self.table.put_action(flushed, ABSENT)], kept

    def _drop_active(self, turn: TurnRecord) -> None:
        """Drop a finished turn's ``ACTIVE#`` entry on its own (one DeleteItem)."""
        self.table.delete(f"SESSION#{turn.session_key}", f"ACTIVE#{sortable(turn.created_at)}#{turn.turn_id}")

    def _unlist_action(self, turn: TurnRecord) -> Action:
        """Drop a finishing turn's ``ACTIVE#`` entry (no condition: gone already is fine)."""
        return {"Delete": {"TableName": self.table.name, "Key": active_key(turn)}}

    def _head_item(self, head: Head) -> Item:
        turn = head.turn
        attributes: Item = {"version": n(turn.version)}
        if turn.due_at is not None:  # a put replaces the whole item: otherwise unlisted
            attributes |= index.entry("DUE", turn.turn_id, turn.due_at, self.table.shards)
        if head.claimed:
            attributes["claimed"] = {"BS": sorted(head.claimed)}
        return self._item(f"TURN#{turn.turn_id}", "TURN", head.body(), attributes)

    def _event_item(self, turn_id: str, event: JsonDict | list[JsonDict]) -> Item:
        """One event, or a transition's events as one item (a list, in order): one item per write."""
        group = EventGroup.of(event if isinstance(event, list) else [event], self.clock.now())
        sk = f"EVENT#{sortable(group.stamp)}#{group.counter:012d}#{secrets.token_hex(3)}"
        return self._item(f"TURN#{turn_id}", sk, event, self._ttl())

    def _outbox_item(self, record: OutboxRecord, events: Sequence[JsonDict] = ()) -> Item:
        listed: Item = {}
        if record.due_at is not None:
            listed = index.entry("OUTBOX", record.key, record.due_at, self.table.shards)
        ttl = self._ttl() if record.due_at is None else {}
        sk = f"OUTBOX#{record.key}"  # eventId#target: one item per target
        body = record.to_dict()
        if events:  # the delivery's audit events ride in its item, ordered as an EVENT# item's would be
            body[OUTBOX_EVENTS] = EventGroup.of(events, self.clock.now()).to_dict()
        return self._item(f"TURN#{record.turn_id}", sk, body, {**listed, **ttl})

    def _call_item(self, call: CallRecord) -> Item:
        return self._item(f"TURN#{call.turn_id}", f"CALL#{call.tool_use_id}", call.to_dict(), self._ttl())


def active_key(turn: TurnRecord) -> Item:
    """The key of a turn's entry among its session's unfinished turns (same order as ``TURN#``)."""
    return key(f"SESSION#{turn.session_key}", f"ACTIVE#{sortable(turn.created_at)}#{turn.turn_id}")


def append_conflict(
    lost: TransactionCancelled, first: int, count: int, session_id: str, expected_len: int
) -> Exception:
    """What a cancelled append means: a message item that had to be absent exists (the session moved).

    ``first``/``count``: where the append's actions are. ``current`` is a length the history has at
    least (the first taken slot plus one).
    """
    taken = [i for i in range(first, first + count) if lost.failed(i)]
    if not taken:
        return StoreError(f"session {session_id}: the append was refused")
    current = expected_len + taken[0] - first + 1
    return VersionConflict(f"session {session_id} has moved past {expected_len} messages", current=current)
