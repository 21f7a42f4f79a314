"""The DynamoDB turn store's transitions: one Change planned into one write, and what a lost one means.

:meth:`DynamoCommits.commit` is the turn store's ``commit``
(:class:`~loopengine.stores.dynamodb.DynamoTurnStore` inherits it): the turn's head (with the
transition's events, claims and outcomes in its log: :mod:`~loopengine.stores.dynamodb_heads`), the
checkpoint, the session's messages, notifications and an idempotency key, as one TransactWriteItems
(a PutItem when it is one item). A failed condition is read from the ALL_OLD the write returns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from loopengine.app.ports import Change, Committed
from loopengine.domain.base.errors import AlreadyExists, StoreError, VersionConflict
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.idempotency import IdempotencyRecord
from loopengine.domain.turns import TurnRecord, TurnStatus
from loopengine.stores import dynamodb_bill as bill
from loopengine.stores.dynamodb_codec import n
from loopengine.stores.dynamodb_heads import EventGroup, Head, TurnLog, claim_digest
from loopengine.stores.dynamodb_items import Action, DynamoStore, append_conflict
from loopengine.stores.dynamodb_table import (
    ABSENT,
    TRANSACTION_ITEMS,
    Condition,
    TransactionCancelled,
    version_is,
)

_REPLANS = 5
"""Plans of one commit when standalone claims of other calls keep growing the head's ``claimed`` set."""


def _head_condition(expected: int, claimed: frozenset[bytes]) -> Condition:
    """The head is at version ``expected`` and its ``claimed`` set is still ``claimed``.

    The put rewrites the set, and a standalone claim adds to it without a new version; the set only
    grows, so an equal size is an equal set.
    """
    names = {"#version": "version", "#claimed": "claimed"}
    values = {":expected": n(expected)}
    if not claimed:
        return Condition("#version = :expected AND attribute_not_exists(#claimed)", names, values)
    values[":claims"] = n(len(claimed))
    return Condition("#version = :expected AND size(#claimed) = :claims", names, values)


@dataclass
class _Plan:
    """One commit's actions and, per action, how to parse the record a failed version condition returns."""

    actions: list[Action] = field(default_factory=list)
    parsers: list[Callable[[JsonDict], Any] | None] = field(default_factory=list)
    append_at: int = -1
    """Where the append's first message action is, when the commit appends messages."""
    appended: int = 0
    """How many message actions it has."""
    turn_at: int = -1
    """Where the turn's compare-and-set is, when the commit replaces a turn."""
    stored: Head | None = None
    """The turn's head as the commit stores it (remembered once it landed)."""
    claims: frozenset[bytes] = frozenset()
    """Digests of the calls the commit claims on the turn's head."""

    def add(self, actions: list[Action], parse: Callable[[JsonDict], Any] | None = None) -> None:
        """Append ``actions``, each read back on failure with ``parse`` (None: a create)."""
        self.actions += actions
        self.parsers += [parse] * len(actions)


class _ClaimsMoved(Exception):
    """The head's ``claimed`` set grew at the version the commit replaces: plan it again."""


class DynamoCommits(DynamoStore):
    """How the turn store commits a transition (see the module)."""

    _configs: set[str]
    """Config hashes known stored (snapshots never change): a start stores its config only otherwise."""

    def commit(self, change: Change) -> Committed:
        """One write for the whole transition (see :class:`~loopengine.app.ports.Change`).

        A TransactWriteItems, or a PutItem when the transition writes one item only (a turn's head
        whose log stays under its budget). A failed version condition becomes VersionConflict
        carrying that record's ALL_OLD; a taken create key or a call claimed before becomes
        AlreadyExists.
        """
        for _ in range(_REPLANS):
            plan, turn, cp = self._plan(change)
            if len(plan.actions) > TRANSACTION_ITEMS:
                raise StoreError(
                    f"a state change of turn {change.turn_id} needs more than {TRANSACTION_ITEMS} items"
                )
            try:
                self.table.transact(plan.actions)
            except TransactionCancelled as lost:
                try:
                    self._lost(lost, change, plan)
                except _ClaimsMoved:
                    continue
            if plan.stored is not None:
                self.heads.remember(plan.stored)
            if change.config is not None:
                self._configs.add(change.config[0])
            return Committed(turn, cp)
        raise StoreError(f"turn {change.turn_id}: its claims kept changing")

    def _plan(self, change: Change) -> tuple[_Plan, TurnRecord | None, TurnCheckpoint | None]:
        """The transaction's actions, and the turn and checkpoint as they will be stored."""
        plan = _Plan()
        turn: TurnRecord | None = None
        cp: TurnCheckpoint | None = None
        logged = False  # the events, claims and outcomes ride in the turn's head
        if change.new_turn is not None:
            turn = change.new_turn
            plan.claims = frozenset(claim_digest(c.tool_use_id) for c in change.claims)
            log = TurnLog().add(self._group(change), (*change.claims, *change.calls_to_store()))
            actions, plan.stored = self._create_turn_actions(turn, log, plan.claims)
            plan.add(actions)
            logged = True
        if change.turn is not None:
            turn = dataclasses.replace(change.turn, version=change.turn.version + 1)
            head = self._head_at(change.turn)
            plan.turn_at = len(plan.actions)
            plan.claims = frozenset(claim_digest(c.tool_use_id) for c in change.claims)
            if plan.claims & head.claimed:
                raise AlreadyExists(f"turn {change.turn_id}: a call to claim was claimed before")
            log = head.log.add(self._group(change), (*change.claims, *change.calls_to_store()))
            claimed = head.claimed | plan.claims
            condition = _head_condition(change.turn.version, head.claimed)
            actions, plan.stored = self._head_actions(Head(turn, log, claimed), condition)
            plan.add(actions[:1], TurnRecord.from_dict)
            plan.add(actions[1:])
            logged = True
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
            plan.append_at = len(plan.actions)
            plan.add(appended := self._append_actions(add.session_id, add.messages, add.expected_len))
            plan.appended = len(appended)
        if change.events and not logged:  # one item for all of a transition's events
            events = list(change.events) if len(change.events) > 1 else change.events[0]
            plan.add([self.table.put_action(self._event_item(change.turn_id, events), ABSENT)])
        for record in change.outbox:
            plan.add([self.table.put_action(self._outbox_item(record), ABSENT)])
        if change.idempotency is not None:
            plan.add([self._key_action(change.idempotency)])
        plan.add(self._bill_actions(change))
        if not logged:
            plan.add([self.table.put_action(self._call_item(c), ABSENT) for c in change.claims])
            outcomes = [self._call_item(c) for c in change.calls_to_store()]
            plan.add([{"Put": {"TableName": self.table.name, "Item": item}} for item in outcomes])
        return plan, turn, cp

    def _bill_actions(self, change: Change) -> list[Action]:
        """What rides in a transition for the bill and the session.

        A config snapshot not known stored, a compaction's items (a retried write stores the same
        again), a usage counter's ``ADD``.
        """
        actions: list[Action] = []
        if change.config is not None and change.config[0] not in self._configs:
            item = self._item(f"CONFIG#{change.config[0]}", "CONFIG", change.config[1])
            actions.append(
                {"Put": {"TableName": self.table.name, "Item": item}}
            )  # same content: no condition
        if change.compact is not None:
            body = change.compact.compaction.to_dict()
            items = [self._item(pk, sk, body) for pk, sk in bill.compact_keys(change.compact)]
            actions += [{"Put": {"TableName": self.table.name, "Item": item}} for item in items]
        if change.tally is not None:
            actions.append(bill.tally_action(self.table, change.tally))
        return actions

    def _group(self, change: Change) -> EventGroup | None:
        return EventGroup.of(change.events, self.clock.now()) if change.events else None

    def _head_at(self, turn: TurnRecord) -> Head:
        """The stored head of ``turn`` at its version: remembered, or read (VersionConflict if it moved).

        Versions only grow, so a later version this process read or wrote means ``turn`` is stale.
        """
        head = self.heads.recall(turn.turn_id)
        if head is None or head.turn.version < turn.version:  # not held here: read it
            head = self._read_head(turn.turn_id)
        # a later version held here is stored (or later still): the write would fail, so it is not sent
        if head is None or head.turn.version != turn.version:
            current = None if head is None else head.turn
            raise VersionConflict(f"turn {turn.turn_id} is not at version {turn.version}", current=current)
        return head

    def _key_action(self, record: IdempotencyRecord) -> Action:
        """Create the key's item unless an unexpired one holds it (``ttl`` lets DynamoDB drop it later)."""
        item = self._item(f"IDEM#{record.key}", "IDEM", record.to_dict(), {"ttl": n(int(record.expires_at))})
        free = Condition(
            "attribute_not_exists(pk) OR #ttl <= :now", {"#ttl": "ttl"}, {":now": n(int(record.created_at))}
        )
        return self.table.put_action(item, free)

    def _lost(self, lost: TransactionCancelled, change: Change, plan: _Plan) -> NoReturn:
        """Raise what a cancelled commit means: the first failed condition decides."""
        first, count = plan.append_at, plan.appended
        if first >= 0 and any(lost.failed(i) for i in range(first, first + count)):
            add = change.append
            assert add is not None
            raise append_conflict(lost, first, count, add.session_id, add.expected_len) from None
        if plan.turn_at >= 0 and lost.failed(plan.turn_at):
            old = lost.old(plan.turn_at)
            stored = None if old is None else self._head_of(old)
            assert change.turn is not None
            if stored is not None and stored.turn.version == change.turn.version:  # its claimed set grew
                if plan.claims & stored.claimed:
                    raise AlreadyExists(f"turn {change.turn_id}: a call to claim was claimed before")
                raise _ClaimsMoved
            current = None if stored is None else stored.turn
            raise VersionConflict(f"turn {change.turn_id}: a record changed", current=current) from None
        for index, parse in enumerate(plan.parsers):
            if lost.failed(index) and parse is not None:
                old = lost.old(index)
                current = parse(self.table.decode(old)) if old else None
                raise VersionConflict(f"turn {change.turn_id}: a record changed", current=current) from None
        raise AlreadyExists(f"turn {change.turn_id}: a record to create exists") from lost
