"""A session's history as a step reads it: the messages since its latest compaction (no I/O).

A session that outgrew its model's window is compacted (:mod:`loopengine.app.compaction`): its oldest
whole exchanges are replaced by a :class:`Compaction` record (``{"upTo": n, "summary"?: text}``:
messages before index ``n`` are no longer sent to the model; the summary, if any, stands in for them).
Nothing is deleted: the session keeps every message, and ``GET /sessions/{id}`` shows them all with
the compaction markers. A step reads only from the latest compaction on (a :class:`History`), so what
a step reads and sends stays bounded however long the session grows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from loopengine.domain.jsontypes import JsonDict
from loopengine.domain.messages import Message


@dataclass(frozen=True, slots=True)
class Compaction:
    """Messages before ``up_to`` are replaced: by ``summary``, or (trimmed) by nothing."""

    up_to: int
    summary: str | None = None

    def to_dict(self) -> JsonDict:
        """The stored and shown form: ``{"upTo": n, "summary"?: text}``."""
        out: JsonDict = {"upTo": self.up_to}
        if self.summary is not None:
            out["summary"] = self.summary
        return out

    @staticmethod
    def from_dict(d: JsonDict) -> Compaction:
        """Parse the stored form."""
        summary = d.get("summary")
        return Compaction(int(d["upTo"]), summary if isinstance(summary, str) else None)


ELIDED = Message("user", ())
"""What stands at the index of a message the step did not read (before its compaction)."""


class History(list[Message]):
    """A session's messages at their own indexes, read from ``start`` on (earlier ones are :data:`ELIDED`).

    It is the list the loop has always used (``len`` is the session's length, ``h[i]`` message ``i``,
    ``h[-1]`` the last), so appends and checkpoints keep their indexes; ``compaction`` is the latest
    compaction (``start`` is its ``up_to``), whose summary the model is sent in place of the rest.
    """

    __slots__ = ("compaction", "start")

    def __init__(
        self, messages: Iterable[Message] = (), start: int = 0, compaction: Compaction | None = None
    ) -> None:
        super().__init__([ELIDED] * start)
        self.extend(messages)
        self.start = start
        self.compaction = compaction

    def live(self) -> list[Message]:
        """The messages read: from ``start`` on."""
        return self[self.start :]

    def compact(self, compaction: Compaction) -> None:
        """Drop what ``compaction`` replaces from the messages read."""
        up_to = min(compaction.up_to, len(self))
        self[self.start : up_to] = [ELIDED] * (up_to - self.start)
        self.start, self.compaction = up_to, compaction
