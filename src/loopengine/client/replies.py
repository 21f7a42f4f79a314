"""What the API answers, as :class:`loopengine.client.Client` returns it: typed records and the errors.

Each record keeps the API's whole JSON as ``body`` (or ``data``), so a field a newer server adds is
never lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import httpx

from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.messages import Message


class Unreachable(Exception):
    """The server did not answer (refused, reset, timed out, not HTTP)."""


class ApiError(Exception):
    """An error answer of the API: ``status``, its ``code`` (``error``) and ``message``, the whole body."""

    def __init__(self, status: int, body: JsonDict, retry_after: float | None = None) -> None:
        message = body.get("message")
        super().__init__(message if isinstance(message, str) else f"HTTP {status}")
        self.status, self.body, self.retry_after = status, body, retry_after
        code = body.get("error")
        self.code = code if isinstance(code, str) else f"http_{status}"


def error(response: httpx.Response) -> ApiError:
    """The :class:`ApiError` of an error answer (with its ``Retry-After``, for a 429)."""
    try:
        retry_after: float | None = float(response.headers.get("retry-after") or "")
    except ValueError:
        retry_after = None
    return ApiError(response.status_code, json_of(response), retry_after)


@dataclass(frozen=True, slots=True)
class PendingItem:
    """An item waiting for a human, as the API lists it."""

    pending_id: str
    kind: Literal["approval", "question"]
    tool: str
    args: JsonDict
    reason: str
    args_hash: str

    @staticmethod
    def from_json(data: JsonDict) -> PendingItem:
        kind: Literal["approval", "question"] = "question" if data.get("kind") == "question" else "approval"
        return PendingItem(
            str(data["pendingId"]),
            kind,
            str(data.get("tool", "")),
            dict(data.get("args") or {}),
            str(data.get("reason", "")),
            str(data.get("argsHash", "")),
        )


@dataclass(frozen=True, slots=True)
class TurnReply:
    """What the messages route answers (and a decision with ``wait``): the turn as it stands."""

    status: str
    turn_id: str
    session_id: str
    stop_reason: str | None = None
    text: str | None = None
    pending_items: tuple[PendingItem, ...] = ()
    body: JsonDict | None = None

    @staticmethod
    def from_json(data: JsonDict) -> TurnReply:
        return TurnReply(
            status=str(data.get("status")),
            turn_id=str(data.get("turnId")),
            session_id=str(data.get("sessionId", "")),
            stop_reason=data.get("stopReason"),
            text=data.get("text"),
            pending_items=tuple(PendingItem.from_json(p) for p in data.get("pendingItems") or []),
            body=data,
        )


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a decision answers: recorded, or already resolved (a late click), or with ``wait`` the turn."""

    already_resolved: bool = False
    expired: bool = False
    outstanding: int | None = None
    status: str | None = None
    turn_id: str | None = None
    turn: TurnReply | None = None
    body: JsonDict | None = None

    @staticmethod
    def from_json(data: JsonDict) -> Resolution:
        if "resolved" not in data and "alreadyResolved" not in data:  # ?wait= answered the turn's outcome
            turn = TurnReply.from_json(data)
            return Resolution(status=turn.status, turn_id=turn.turn_id, turn=turn, body=data)
        outstanding = data.get("outstanding")
        return Resolution(
            already_resolved=bool(data.get("alreadyResolved")),
            expired=bool(data.get("expired")),
            outstanding=outstanding if isinstance(outstanding, int) else None,
            status=data.get("status"),
            turn_id=data.get("turnId"),
            body=data,
        )


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a turn: ``seq`` (its place in the trail), ``type``, ``at``, and all its fields."""

    seq: int
    type: str
    at: float
    data: JsonDict

    @staticmethod
    def from_json(data: JsonDict) -> Event:
        return Event(int(data.get("seq") or 0), str(data.get("type", "")), float(data.get("at") or 0), data)

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the event (``default`` when it has none)."""
        return self.data.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


@dataclass(frozen=True, slots=True)
class EventPage:
    """One read of a turn's events: the events, the cursor to ask from next, whether it had finished."""

    events: tuple[Event, ...]
    next: int
    finished: bool


@dataclass(frozen=True, slots=True)
class Cancelled:
    """What Stop answers; ``note`` says what it cannot undo."""

    turn_id: str
    status: str
    stop_reason: str | None
    cancelled: bool
    note: str


@dataclass(frozen=True, slots=True)
class Session:
    """A session's durable history."""

    session_id: str
    messages: tuple[Message, ...]


def json_of(response: httpx.Response) -> JsonDict:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
