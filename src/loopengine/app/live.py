"""Model text as it streams: this process's live bus, and the coalesced durable ``text:delta`` events.

A streaming model client hands each piece of an answer's text to a :class:`TextStream` (the request's
``on_text``), from the thread that runs the call (:mod:`loopengine.app.worker.model_call`). It goes two ways:

* **this process, at once.** Every piece is published to :data:`BUS`, a bounded in-memory ring per turn
  (:data:`RING_PIECES` pieces of each of the last :data:`RING_TURNS` turns). Readers in the same process
  (``Engine.follow``, :mod:`loopengine.app.follow`) see each piece as it arrives. Nothing is stored per
  piece, and nothing leaves the process.
* **any process, coalesced.** The worker waiting for the call writes the text that arrived since its last
  write as one durable ``text:delta`` audit event, at most every :data:`DELTA_FLUSH_SECONDS` per call,
  so the long poll (``GET /turns/{turnId}/events``, and its Server-Sent Events under ``loopengine dev``)
  shows model text in pieces a quarter of a second apart. The cost is bounded: at most four small writes
  a second while a model is talking, none for a model that answers within a quarter of a second. The
  tail is never written: the ``model_response`` event that follows holds the whole text, and the session
  history holds whole messages only.

A ``text:delta`` event::

    {"type": "text:delta", "at": ..., "call": "mc_...", "offset": 120, "text": "the piece"}

``call`` names one model call (a turn makes several: one per step, again after a retry); ``offset`` is
how many characters of that call's text came before the piece. The pieces of one call, placed by their
offsets, spell a prefix of its ``model_response`` text, so a reader that sees a piece twice (live and
durable) or late knows where it goes. A call that was abandoned (``model_call_abandoned``) or failed
(``model_error``) leaves pieces that no ``model_response`` completes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass

from loopengine.domain.base.clock import Clock
from loopengine.domain.base.ids import new_id
from loopengine.domain.base.jsontypes import JsonDict

TEXT_DELTA = "text:delta"
DELTA_FLUSH_SECONDS = 0.25
"""The least time between two durable ``text:delta`` events of one model call."""
RING_PIECES = 2048
"""Pieces kept per turn; a reader further behind than this finds the durable events instead."""
RING_TURNS = 256
"""Turns this process keeps pieces of (the least recently written ones are dropped first)."""


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece of a model call's text: ``offset`` characters of the call's text came before it."""

    call: str
    offset: int
    text: str
    at: float

    def event(self) -> JsonDict:
        """The ``text:delta`` event of this piece."""
        return {
            "type": TEXT_DELTA,
            "at": self.at,
            "call": self.call,
            "offset": self.offset,
            "text": self.text,
        }


class _Ring:
    __slots__ = ("pieces", "published")

    def __init__(self, size: int) -> None:
        self.pieces: deque[Piece] = deque(maxlen=size)
        self.published = 0


class LiveBus:
    """Pieces of model text per turn, in memory, for readers in this process.

    A reader keeps a position (how many pieces of the turn it has read) and asks for what came after
    it; pieces that fell out of the ring are skipped. Thread-safe.
    """

    def __init__(self, pieces: int = RING_PIECES, turns: int = RING_TURNS) -> None:
        self._size, self._turns = pieces, turns
        self._rings: OrderedDict[str, _Ring] = OrderedDict()
        self._changed = threading.Condition()

    def publish(self, turn_id: str, piece: Piece) -> None:
        """Add ``piece`` to the turn's ring and wake its readers."""
        with self._changed:
            ring = self._rings.get(turn_id)
            if ring is None:
                ring = self._rings[turn_id] = _Ring(self._size)
                while len(self._rings) > self._turns:
                    self._rings.popitem(last=False)
            self._rings.move_to_end(turn_id)
            ring.pieces.append(piece)
            ring.published += 1
            self._changed.notify_all()

    def position(self, turn_id: str) -> int:
        """How many pieces of the turn were published so far (where a new reader starts)."""
        with self._changed:
            ring = self._rings.get(turn_id)
            return ring.published if ring is not None else 0

    def read(self, turn_id: str, position: int) -> tuple[list[Piece], int]:
        """The pieces published after ``position`` that the ring still holds, and the new position."""
        with self._changed:
            ring = self._rings.get(turn_id)
            if ring is None or ring.published <= position:
                return [], max(position, ring.published if ring is not None else 0)
            held = list(ring.pieces)
            return held[max(0, len(held) - (ring.published - position)) :], ring.published

    def wait(self, turn_id: str, position: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a piece after ``position``; True if one is there."""
        with self._changed:
            return self._changed.wait_for(lambda: self._published(turn_id) > position, max(0.0, timeout))

    def _published(self, turn_id: str) -> int:
        ring = self._rings.get(turn_id)
        return ring.published if ring is not None else 0


BUS = LiveBus()
"""This process's bus: what model calls running here publish, and ``Engine.follow`` reads."""


class StreamClosed(Exception):
    """The worker no longer wants the call (abandoned): raised into the model client to end its stream."""


class TextStream:
    """One model call's text as it streams: the request's ``on_text``, and what the worker flushes.

    :meth:`__call__` runs in the model client's thread; :meth:`flush` and :meth:`close` in the worker's.
    """

    def __init__(self, turn_id: str, clock: Clock, bus: LiveBus = BUS) -> None:
        self.turn_id, self.call = turn_id, new_id("mc_")
        self._clock, self._bus = clock, bus
        self._lock = threading.Lock()
        self._text: list[str] = []  # not flushed yet
        self._length = self._flushed = 0
        self._closed = False

    def __call__(self, text: str) -> None:
        """A piece of the answer: published at once, kept for the next flush; StreamClosed once closed."""
        if not text:
            return
        with self._lock:
            if self._closed:
                raise StreamClosed(self.call)
            offset = self._length
            self._text.append(text)
            self._length += len(text)
            self._bus.publish(self.turn_id, Piece(self.call, offset, text, self._clock.now()))

    def flush(self) -> Piece | None:
        """The text that arrived since the last flush as one piece (``None`` if nothing did)."""
        with self._lock:
            if not self._text:
                return None
            piece = Piece(self.call, self._flushed, "".join(self._text), self._clock.now())
            self._text, self._flushed = [], self._length
            return piece

    def close(self) -> None:
        """The call is over (answered, failed or abandoned): a later piece raises :class:`StreamClosed`."""
        with self._lock:
            self._closed = True
