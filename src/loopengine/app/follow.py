"""Follow a turn as it happens, in this process: its events, and model text piece by piece.

:func:`follow` (``Engine.follow``) yields the turn's durable events after a cursor, as
``GET /turns/{turnId}/events`` has them (each with its ``seq``), and between them the pieces of model
text that calls running *in this process* publish on the live bus (:mod:`loopengine.app.live`), as
``text:delta`` events with ``"live": true`` and no ``seq`` (they are not stored). Each character is
yielded once: live and durable pieces of one call are joined by their ``offset``, so a durable
``text:delta`` comes through only with text not seen live (a call running in another process has only
those), and a reader that prints every ``text:delta``'s text prints the text once.

Order is the turn's: live pieces are placed among the durable events by their time (``at``, one clock),
a call's pieces before the ``model_response`` / ``model_call_abandoned`` / ``model_error`` that ends it
(a piece read only after that end is dropped: the end holds the whole text), and the first piece of a
new call waits for a store read that began after it was published, so whatever was written before the
call (tool outcomes, decisions) comes first. The store is read again 50 ms after something new and up
to every 0.5 s while nothing is; a published piece wakes the reader at once.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from loopengine.app.live import BUS, TEXT_DELTA, LiveBus, Piece
from loopengine.domain.base.jsontypes import JsonDict

if TYPE_CHECKING:
    from loopengine.app.engine import Engine
    from loopengine.app.request.resolution import Decider


FIRST_READ_SECONDS, MAX_READ_SECONDS = 0.05, 0.5
CALL_ENDS = frozenset({"model_response", "model_call_abandoned", "model_error"})
"""Durable events that end a model call."""


class _Text:
    """How much of each call's text a reader was given; cuts pieces to what is new."""

    def __init__(self) -> None:
        self.shown: dict[str, int] = {}

    def take(self, event: JsonDict) -> JsonDict | None:
        """``event`` cut to the text not given yet (``None`` if all of it was)."""
        call, offset, text = event.get("call"), event.get("offset"), event.get("text")
        if not isinstance(call, str) or not isinstance(offset, int) or not isinstance(text, str):
            return event
        seen = self.shown.get(call)
        if seen is not None and offset + len(text) <= seen:
            return None
        if seen is not None and offset < seen:
            text, offset = text[seen - offset :], seen
        self.shown[call] = max(seen or 0, offset + len(text))
        return {**event, "offset": offset, "text": text}


class _Follower:
    """One reader's place: the durable cursor, the bus position, the pieces read and not yielded."""

    def __init__(self, engine: Engine, turn_id: str, after: int, who: Decider | None, bus: LiveBus) -> None:
        self.engine, self.turn_id, self.after, self.who, self.bus = engine, turn_id, after, who, bus
        # from the start: every piece the ring holds, each placed by its time among the events; from
        # a cursor: the pieces published from now on (what came before is the reader's already)
        self.position = bus.position(turn_id) if after > 0 else 0
        self.waiting: deque[Piece] = deque()
        self.text = _Text()
        self.horizon = float("-inf")  # the time of the last call end given: older pieces are stale
        self.ended: set[str] = set()  # calls whose end was given: their late pieces are stale
        self.open: str | None = None  # the call whose pieces are being given (until its end)
        self.finished = self.paused = self.fresh = False

    def read_bus(self) -> None:
        pieces, self.position = self.bus.read(self.turn_id, self.position)
        self.waiting.extend(pieces)

    def pieces(
        self, known_only: bool = False, until: float | None = None, ends: bool = False
    ) -> Iterator[JsonDict]:
        """Yield waiting pieces in order: all; those of calls given before; or those before an event.

        Before an event stamped ``until`` go the pieces stamped earlier and, stamped at the same time
        (a clock that did not move), those :meth:`_ties` places first.
        """
        while self.waiting:
            head = self.waiting[0]
            if until is None:
                if known_only and head.call not in self.text.shown:
                    return
            elif head.at > until or (head.at == until and not self._ties(head, ends)):
                return
            self.waiting.popleft()
            if head.at < self.horizon or head.call in self.ended:
                continue
            self.open = head.call
            cut = self.text.take({**head.event(), "live": True})
            if cut is not None:
                yield cut

    def _ties(self, piece: Piece, ends: bool) -> bool:
        """Whether ``piece`` goes before an event stamped at the same time.

        Before an event that ends a call: the pieces of the call it ends (the one being given, else
        the first waiting). Before any other: the pieces of a call already given.
        """
        if ends:
            return self.open in (None, piece.call)
        return piece.call in self.text.shown

    def stored(self) -> Iterator[JsonDict]:
        """Yield the durable events after the cursor, with the waiting pieces in their places."""
        found, self.after, self.finished = self.engine.events(self.turn_id, self.after, 0.0, self.who)
        for event in found:
            at, kind = event.get("at"), event.get("type")
            if isinstance(at, int | float):
                yield from self.pieces(until=at, ends=kind in CALL_ENDS)
                if kind in CALL_ENDS:
                    self.horizon = max(self.horizon, at)
            if kind in CALL_ENDS and self.open is not None:
                self.ended.add(self.open)
                self.open = None
            if kind in ("paused", "resumed"):
                self.paused = kind == "paused"
            out = self.text.take(event) if kind == TEXT_DELTA else event
            if out is not None:
                yield out
        yield from self.pieces()  # read before this store read began: nothing stored comes before them
        self.fresh = bool(found)


def follow(
    engine: Engine,
    turn_id: str,
    after: int = 0,
    who: Decider | None = None,
    *,
    until_pause: bool = False,
    timeout: float | None = None,
    bus: LiveBus = BUS,
) -> Iterator[JsonDict]:
    """The turn's events after ``after`` as they happen, with live model text (see the module docstring).

    Ends after the turn's ``finished`` event; with ``until_pause`` also after a pause's events (the
    ``paused`` event and its ``approval:pending`` / ``question:pending`` events, written together);
    after ``timeout`` seconds in any case. NotFound (at once, not at the first event) for an unknown
    turn or one of a tenant ``who`` cannot see.
    """
    engine.turn(turn_id, who)
    return _follow(_Follower(engine, turn_id, after, who, bus), until_pause, timeout)


def _follow(f: _Follower, until_pause: bool, timeout: float | None) -> Iterator[JsonDict]:
    deadline = None if timeout is None else time.monotonic() + timeout
    pause, next_read = FIRST_READ_SECONDS, 0.0
    while True:
        f.read_bus()
        yield from f.pieces(known_only=True)
        if f.waiting or time.monotonic() >= next_read:  # a new call's first piece waits for a read
            yield from f.stored()
            if f.finished or (until_pause and f.paused):
                return
            pause = FIRST_READ_SECONDS if f.fresh else min(pause * 2, MAX_READ_SECONDS)
            next_read = time.monotonic() + pause
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return
        until = next_read if deadline is None else min(next_read, deadline)
        f.bus.wait(f.turn_id, f.position, until - now)
