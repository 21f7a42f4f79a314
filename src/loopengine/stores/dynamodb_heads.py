"""A turn's head item: the turn, the log of its latest transitions, and the claim guard.

Why: a transition used to write the turn, an event item and a call item per claim or outcome, each
billed twice inside a transaction. The head carries them instead, so the common transition writes
one item of the turn's partition, under a KB:

- **head** (``TURN#<tid>`` / ``TURN``): the body is the turn's JSON plus ``log``: the audit events
  (one group per transition) and the call records (claims and outcomes) written since the last
  flush; an outcome whose result its transition stores in the batch's answer or checkpoint is
  logged without it (``Change.calls_to_store``: a tool result is stored once). ``claimed`` (a
  binary set) holds a digest of every call ever claimed on the turn: a
  claim's write carries ``NOT contains(claimed, <digest>)``, so a call is claimed at most once
  (standalone claims add to the set too; see ``DynamoTurnStore.start_call``).
- **flushed log** (``TURN#<tid>`` / ``LOG#<version:012d>``): when a transition would take the head
  past :data:`HEAD_BUDGET` bytes, the head's log and the transition's entries move into one item
  created absent in the same transaction, and the head starts an empty log.

Readers merge the head's log, the flushed logs, and the ``EVENT#``/``CALL#`` items written on their
own (a text delta, an outcome recorded after the turn moved on, a standalone claim): events in the
order of their stamps (ties: the writing process's counter, as the ``EVENT#`` keys are ordered), a
call's record with an outcome over its claim.

A commit needs the head's log as stored at the version it replaces. Every read and write of a head
in this process remembers it (:class:`HeadCache`); a commit whose version is not remembered reads
the head once first.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.turns import CallRecord, TurnRecord
from loopengine.stores.dynamodb_codec import Item
from loopengine.stores.dynamodb_tokens import WRITE_TOKEN, new_token

HEAD_BUDGET = 1024
"""Bytes a head may take (its write token included) before its log is flushed: one write unit."""
CACHE_SIZE = 4096
"""Heads a process remembers (the latest it read or wrote, per turn)."""
_EVENT_COUNTER = itertools.count(1)
"""This process's event counter: breaks ties between equal stamps (``EVENT#`` keys carry it too)."""
_TOKEN_BYTES = len(WRITE_TOKEN) + len(new_token())
"""What the write token the table stamps on every item adds to it."""


def claim_digest(tool_use_id: str) -> bytes:
    """The short form of a call id in ``claimed``: 64 bits (a collision in one turn's calls: never)."""
    return hashlib.blake2b(tool_use_id.encode(), digest_size=8).digest()


@dataclass(frozen=True)
class EventGroup:
    """One transition's events, with the stamp and counter that order it among the turn's events."""

    stamp: float
    counter: int
    events: tuple[JsonDict, ...]

    @staticmethod
    def of(events: Sequence[JsonDict], now: float) -> EventGroup:
        """A group written now: stamped by its first event's ``at`` (else ``now``)."""
        at = events[0].get("at") if events else None
        stamp = float(at) if isinstance(at, int | float) and not isinstance(at, bool) else now
        return EventGroup(stamp, next(_EVENT_COUNTER), tuple(events))

    def to_dict(self) -> JsonDict:
        """The stored form (the stamp only where the first event does not carry it)."""
        stored: JsonDict = {"n": self.counter, "e": list(self.events)}
        if not self.events or self.events[0].get("at") != self.stamp:
            stored["t"] = self.stamp
        return stored

    @staticmethod
    def from_dict(d: JsonDict) -> EventGroup:
        """Parse the stored form."""
        events = tuple(d["e"])
        stamp = d.get("t", events[0].get("at") if events else 0.0)
        return EventGroup(float(stamp), int(d["n"]), events)


@dataclass(frozen=True)
class TurnLog:
    """Events and call records of a turn not yet flushed out of its head (or one flushed item)."""

    groups: tuple[EventGroup, ...] = ()
    calls: tuple[CallRecord, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.groups or self.calls)

    def add(self, group: EventGroup | None, calls: Iterable[CallRecord]) -> TurnLog:
        """The log with one transition's entries after it."""
        groups = self.groups if group is None else (*self.groups, group)
        return TurnLog(groups, (*self.calls, *calls))

    def to_dict(self) -> JsonDict:
        """The stored form: a call without its turn id (the item's key says it) and without empty fields."""
        calls = [_compact(c) for c in self.calls]
        return {"events": [g.to_dict() for g in self.groups], "calls": calls}

    @staticmethod
    def from_dict(d: JsonDict, turn_id: str) -> TurnLog:
        """Parse the stored form of ``turn_id``'s log."""
        groups = tuple(EventGroup.from_dict(g) for g in d.get("events") or ())
        calls = tuple(CallRecord.from_dict({**c, "turnId": turn_id}) for c in d.get("calls") or ())
        return TurnLog(groups, calls)


@dataclass(frozen=True)
class Head:
    """A turn as its head item holds it."""

    turn: TurnRecord
    log: TurnLog
    claimed: frozenset[bytes] = field(default_factory=frozenset)
    """Digests of the calls claimed on the turn (:func:`claim_digest`)."""

    @staticmethod
    def parse(body: JsonDict, item: Item) -> Head:
        """The head of a decoded body and its item (for ``claimed``)."""
        fields = dict(body)
        log = fields.pop("log")
        turn = TurnRecord.from_dict(fields)
        claimed = frozenset(bytes(b) for b in item.get("claimed", {}).get("BS", ()))
        return Head(turn, TurnLog.from_dict(log, turn.turn_id), claimed)

    def body(self) -> JsonDict:
        """The stored body: the turn's JSON plus its log."""
        return {**self.turn.to_dict(), "log": self.log.to_dict()}


def item_size(item: Item) -> int:
    """DynamoDB's size of ``item`` (names plus values), with the write token the table adds to it."""
    return _TOKEN_BYTES + sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    ((kind, held),) = value.items()
    if kind == "S":
        return len(str(held).encode())
    if kind == "B":
        return len(held)
    if kind == "N":
        return len(str(held)) // 2 + 2
    if kind in ("SS", "NS", "BS"):
        return sum(_value_size({kind[0]: v}) for v in held)
    return len(str(held)) + 3  # (maps and lists are not used in items: a generous guess)


class HeadCache:
    """The latest head this process read or wrote, per turn (bounded, shared by threads)."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._heads: OrderedDict[str, Head] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def remember(self, head: Head) -> None:
        """Keep ``head`` unless a later version of its turn is held already."""
        turn_id = head.turn.turn_id
        with self._lock:
            held = self._heads.get(turn_id)
            if held is not None and held.turn.version > head.turn.version:
                return
            self._heads[turn_id] = head
            self._heads.move_to_end(turn_id)
            while len(self._heads) > self._size:
                self._heads.popitem(last=False)

    def recall(self, turn_id: str) -> Head | None:
        """The latest head of ``turn_id`` this process holds, at whatever version."""
        with self._lock:
            return self._heads.get(turn_id)

    def claimed(self, turn_id: str, digest: bytes) -> None:
        """Note a claim added to a head without a new version (a standalone claim)."""
        with self._lock:
            head = self._heads.get(turn_id)
            if head is not None:
                self._heads[turn_id] = Head(head.turn, head.log, head.claimed | {digest})


def _compact(call: CallRecord) -> JsonDict:
    return {k: v for k, v in call.to_dict().items() if k != "turnId" and v is not None}


def merge_events(groups: Iterable[EventGroup]) -> list[JsonDict]:
    """The events of ``groups`` in order: by stamp, then counter (a stable sort keeps ties in place)."""
    ordered = sorted(groups, key=lambda g: (g.stamp, g.counter))
    return [event for group in ordered for event in group.events]


def merge_calls(records: Iterable[CallRecord]) -> dict[str, CallRecord]:
    """One record per call, in the order they were started: its outcome over its claim (the later of two)."""
    best: dict[str, CallRecord] = {}
    for record in records:
        if record.tool_use_id not in best or record.outcome is not None:
            best[record.tool_use_id] = record
    return {r.tool_use_id: r for r in sorted(best.values(), key=lambda r: r.started_at)}
