"""A client for a loopengine HTTP API, for Python callers (httpx): what ``loopengine-client.js`` is for pages.

::

    from loopengine.client import Client

    with Client("http://127.0.0.1:8787", auth="admin:secret") as client:
        turn = client.send_message("customer-service", "Order A-1001 arrived broken.", live=True)
        for event in client.follow(turn.turn_id):
            if event.type == "approval:pending":
                client.approve(event["pendingId"], args_hash=event["argsHash"])
            if event.type == "finished":
                print(event.get("text"))

The same operations as the JavaScript module served at ``GET /chat/static/loopengine-client.js``:
:meth:`Client.send_message` (``Prefer: respond-async`` and an ``Idempotency-Key``: the answer comes at
once with the turn's id, and a lost answer is asked again with the same key, never making a second
turn), :meth:`Client.follow` (the turn's events as Server-Sent Events where the server streams them,
``loopengine dev``, else long polls, resuming from the last event seen, until the turn finishes),
:meth:`Client.approve`, :meth:`Client.deny`, :meth:`Client.answer`, :meth:`Client.cancel`,
:meth:`Client.get_session`. An error answer is :class:`ApiError` (its status, code and message); no
answer at all is :class:`Unreachable`. ``loopengine chat`` is built on it (with ``channel="live"``).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Literal
from urllib.parse import quote

import httpx

from loopengine.client.replies import (
    ApiError,
    Cancelled,
    Event,
    EventPage,
    PendingItem,
    Resolution,
    Session,
    TurnReply,
    Unreachable,
    error,
    json_of,
)
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.messages import Message

STREAM = "text/event-stream"
WAIT_SECONDS = 20.0
"""How long one long poll of :meth:`Client.follow` waits (the API allows up to 25 s)."""
RETRIES = 5
"""Connections :meth:`Client.follow` retries in a row (growing pauses) before it gives up."""
Auth = str | tuple[str, str] | httpx.Auth | None
"""What ``auth`` may be: ``"user:password"``, a (user, password) pair, any ``httpx.Auth``, or none."""

__all__ = [
    "RETRIES",
    "WAIT_SECONDS",
    "ApiError",
    "Auth",
    "Cancelled",
    "Client",
    "Event",
    "EventPage",
    "PendingItem",
    "Resolution",
    "Session",
    "TurnReply",
    "Unreachable",
]


def _auth(auth: Auth) -> httpx.Auth | None:
    if isinstance(auth, str):
        user, sep, password = auth.partition(":")
        if not sep:
            raise ValueError("auth must be 'user:password'")
        return httpx.BasicAuth(user, password)
    if isinstance(auth, tuple):
        return httpx.BasicAuth(*auth)
    return auth


def _frames(lines: Iterator[str]) -> Iterator[tuple[str, JsonDict]]:
    """Server-Sent Events: each frame's event name and its data (JSON), as they arrive."""
    kind, data = "", []
    for line in lines:
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)
            continue
        if data:
            parsed = json.loads("\n".join(data))
            yield kind, parsed if isinstance(parsed, dict) else {}
        kind, data = "", []


class Client:
    """A loopengine HTTP API at ``base_url``: messages, a turn's events, decisions, Stop, a session."""

    def __init__(
        self,
        base_url: str,
        auth: Auth = None,
        *,
        token: str | None = None,
        channel: str | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """A client of the API at ``base_url``.

        ``auth``: ``"user:password"`` or a pair (HTTP Basic), or any ``httpx.Auth``; ``token``: a
        bearer token (a JWT); ``channel``: a label the audit keeps beside each decision
        (``X-Loopengine-Channel``: ``live`` or ``chat``); ``transport``: httpx's (tests, proxies).
        """
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        sent = {"Accept": "application/json", **(headers or {})}
        if token:
            sent["Authorization"] = f"Bearer {token}"
        if channel:
            sent["X-Loopengine-Channel"] = channel
        self.http = httpx.Client(
            base_url=self.base, auth=_auth(auth), headers=sent, timeout=timeout, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self.http.close()

    def _send(
        self,
        method: str,
        path: str,
        body: JsonDict | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> JsonDict:
        sent = dict(headers or {})
        if method != "GET":
            sent["Content-Type"] = "application/json"
        content = None if body is None else json.dumps(body)
        try:
            response = self.http.request(
                method, path, content=content, headers=sent, timeout=timeout or self.timeout
            )
        except httpx.HTTPError as exc:
            raise Unreachable(f"cannot reach {self.base}: {exc}") from None
        if response.is_error:
            raise error(response)
        return json_of(response)

    def health(self, timeout: float | None = None) -> None:
        """Return when ``GET /health`` answers 200 (:class:`Unreachable` or :class:`ApiError` otherwise)."""
        self._send("GET", "/health", timeout=timeout)

    def wait_until_up(
        self,
        seconds: float,
        waiting: Callable[[], object] | None = None,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        """Return once ``GET /health`` answers, asking again (with backoff) for up to ``seconds``.

        For a server still starting (``loopengine dev`` warming its environments): ``waiting`` is called
        once, at the first miss. :class:`Unreachable` when it never answered.
        """
        deadline, pause, told = time.monotonic() + seconds, 0.25, False
        while True:
            try:
                self.health(timeout=max(1.0, min(10.0, deadline - time.monotonic())))
                return
            except Unreachable:
                if time.monotonic() + pause >= deadline:
                    raise
            if not told and waiting is not None:
                waiting()
            told = True
            sleep(pause)
            pause = min(pause * 2, 2.0)

    def send_message(
        self,
        agent: str,
        message: str,
        *,
        session_id: str | None = None,
        tenant: str | None = None,
        live: bool = False,
        idempotency_key: str | None = None,
    ) -> TurnReply:
        """Send a message; the answer comes at once (``running``, or ``queued`` behind a parked turn).

        ``live``: someone is watching (a chat): a pause's notifications wait the agent's ``live_wait``
        for an inline decision first. The request carries an ``Idempotency-Key``; when its answer is
        lost it is sent once more with the same key, and the server answers the turn the first started.
        """
        body: JsonDict = {"message": message, "live": live}
        if session_id:
            body["sessionId"] = session_id
        if tenant:
            body["tenant"] = tenant
        headers = {"Idempotency-Key": idempotency_key or secrets.token_hex(16), "Prefer": "respond-async"}
        path = f"/agents/{quote(agent, safe='')}/messages"
        try:
            return TurnReply.from_json(self._send("POST", path, body, headers))
        except Unreachable:
            return TurnReply.from_json(self._send("POST", path, body, headers))

    def events(self, turn_id: str, after: int = 0, wait: float = 0.0) -> EventPage:
        """One read of the turn's events after ``after``, long-polled up to ``wait`` seconds."""
        path = f"/turns/{quote(turn_id, safe='')}/events?after={after}&wait={wait:g}"
        data = self._send("GET", path, timeout=wait + self.timeout)
        events = tuple(Event.from_json(e) for e in data.get("events") or [])
        return EventPage(events, int(data.get("next") or after), bool(data.get("finished")))

    def follow(
        self, turn_id: str, after: int = 0, *, wait: float = WAIT_SECONDS, stream: bool = True
    ) -> Iterator[Event]:
        """The turn's events after ``after`` as they happen, until it finishes (its ``finished`` event last).

        Server-Sent Events where the server streams them (``stream=False``: long polls only), else long
        polls of ``wait`` seconds; a dropped connection is asked again from the last event yielded (up
        to :data:`RETRIES` times in a row). Stop early by leaving the loop.
        """
        failures, plain = 0, not stream
        while True:
            try:
                if not plain:
                    for event in self._stream(turn_id, after, wait):
                        failures = 0
                        after = max(after, event.seq)
                        yield event
                        if event.type == "finished":
                            return
                    plain = True  # ended before the turn did: one long poll next (it says if it finished)
                    continue
                page = self.events(turn_id, after, wait)
            except Unreachable:
                failures += 1
                if failures > RETRIES:
                    raise
                time.sleep(min(0.25 * 2**failures, 5.0))
                continue
            except ApiError as exc:
                if exc.status != 429:
                    raise
                time.sleep(exc.retry_after or 1.0)
                continue
            failures, plain = 0, not stream
            for event in page.events:
                after = max(after, event.seq)
                yield event
                if event.type == "finished":
                    return
            after = max(after, page.next)
            if page.finished:
                return

    def _stream(self, turn_id: str, after: int, wait: float) -> Iterator[Event]:
        """One answer of the events route read as it comes: SSE frames, or one long poll's JSON."""
        path = f"/turns/{quote(turn_id, safe='')}/events?after={after}&wait={wait:g}"
        accept = {"Accept": f"{STREAM}, application/json;q=0.5"}
        try:
            with self.http.stream("GET", path, headers=accept, timeout=wait + self.timeout) as response:
                if response.is_error:
                    response.read()
                    raise error(response)
                if not response.headers.get("content-type", "").startswith(STREAM):  # API Gateway
                    response.read()
                    yield from (Event.from_json(e) for e in json_of(response).get("events") or [])
                    return
                for kind, data in _frames(response.iter_lines()):
                    if kind == "error":
                        raise ApiError(502, data)
                    yield Event.from_json(data)
        except httpx.HTTPError as exc:
            raise Unreachable(f"lost the event stream from {self.base}: {exc}") from None

    def approve(
        self,
        pending_id: str,
        *,
        edited_args: JsonDict | None = None,
        comment: str | None = None,
        args_hash: str | None = None,
        scope: Literal["turn"] | None = None,
        wait: float | None = None,
    ) -> Resolution:
        """Approve a pending call, as it is or with ``edited_args``.

        The edit is checked against the tool's schema (a 400 :class:`ApiError` leaves the item open).
        ``args_hash``: the call you were shown (409 if it is another); ``wait``: up to that many
        seconds for the resumed turn's outcome (then :attr:`Resolution.turn`).
        """
        body: JsonDict = {"decision": "approve"}
        if edited_args is not None:
            body["editedArgs"] = edited_args
        if scope is not None:
            body["scope"] = scope
        return self._resolve(pending_id, body, comment, args_hash, wait)

    def deny(
        self,
        pending_id: str,
        *,
        comment: str | None = None,
        args_hash: str | None = None,
        wait: float | None = None,
    ) -> Resolution:
        """Deny a pending call (the comment reaches the model with the denial)."""
        return self._resolve(pending_id, {"decision": "deny"}, comment, args_hash, wait)

    def _resolve(
        self, pending_id: str, body: JsonDict, comment: str | None, args_hash: str | None, wait: float | None
    ) -> Resolution:
        if comment:
            body["comment"] = comment
        if args_hash:
            body["argsHash"] = args_hash
        return self._decide(f"/pending-approvals/{quote(pending_id, safe='')}/resolve", body, wait)

    def answer(self, pending_id: str, answer: str, *, wait: float | None = None) -> Resolution:
        """Answer a question the agent asked."""
        return self._decide(
            f"/pending-questions/{quote(pending_id, safe='')}/answer", {"answer": answer}, wait
        )

    def _decide(self, path: str, body: JsonDict, wait: float | None) -> Resolution:
        """POST a decision; with ``wait`` the answer (the turn's outcome) may take that much longer."""
        query = f"?wait={wait:g}" if wait else ""
        return Resolution.from_json(
            self._send("POST", path + query, body, timeout=(wait or 0) + self.timeout)
        )

    def cancel(self, turn_id: str, *, idempotency_key: str | None = None) -> Cancelled:
        """Stop a turn: nothing further runs; what already ran stays done (``note`` says so)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        data = self._send("POST", f"/turns/{quote(turn_id, safe='')}/cancel", headers=headers)
        return Cancelled(
            turn_id=str(data.get("turnId")),
            status=str(data.get("status")),
            stop_reason=data.get("stopReason"),
            cancelled=bool(data.get("cancelled")),
            note=str(data.get("note", "")),
        )

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Session:
        """A session's durable history."""
        query = f"?tenant={quote(tenant, safe='')}" if tenant else ""
        data = self._send("GET", f"/sessions/{quote(session_id, safe='')}{query}")
        messages = tuple(Message.from_dict(m) for m in data.get("messages") or [])
        return Session(str(data.get("sessionId")), messages)

    def get_turn(self, turn_id: str) -> JsonDict:
        """A turn: status, pending items, audit trail (the API's JSON)."""
        return self._send("GET", f"/turns/{quote(turn_id, safe='')}")
