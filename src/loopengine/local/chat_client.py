"""The HTTP side of ``loopengine chat``: JSON requests to a loopengine API, standard library only.

Every request carries the caller's Basic credentials (if any) and ``X-Loopengine-Channel: live``,
so the decisions made in the chat are recorded with channel ``live``. Errors are values, not
exceptions: :meth:`ChatClient.call` returns ``(status, body)`` and raises only
:class:`Unreachable` when no answer came at all.

A message goes with ``Prefer: respond-async`` (the server answers ``202 running`` with the turn's id
at once and its worker runs the turn), so the chat can follow the turn while the model talks:
:meth:`ChatClient.stream` reads ``GET /turns/{turnId}/events`` as Server-Sent Events where the server
streams them (``loopengine dev``) and as one long poll where it does not (API Gateway).
:func:`wait_for_server` gives a server that is still starting up time to answer.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.client import HTTPResponse
from urllib.parse import quote

from loopengine.domain.base.jsontypes import JsonDict

CHANNEL_HEADER = "X-Loopengine-Channel"


SERVER_WAIT_SECONDS = 30.0
"""How long the chat waits for a server that does not answer yet (``loopengine dev`` starting)."""
STREAM = "text/event-stream"


class Unreachable(Exception):
    """The server did not answer (refused, reset, timed out, not HTTP)."""


class EventsFailed(Exception):
    """The events route answered an error (``status``, ``body``), or its stream reported one."""

    def __init__(self, status: int, body: JsonDict) -> None:
        super().__init__(body.get("message") or body.get("error") or str(status))
        self.status, self.body = status, body


class ChatClient:
    """A small JSON client for one loopengine base URL."""

    def __init__(self, base_url: str, auth: str | None = None, timeout: float = 30.0) -> None:
        self.base = base_url.rstrip("/")
        self.auth = auth
        self.timeout = timeout

    def call(
        self,
        method: str,
        path: str,
        body: JsonDict | None = None,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, JsonDict]:
        """``method path`` with a JSON body; the status and the JSON answer (``{}`` when not JSON)."""
        req = self._request(method, path, body, headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return resp.status, _json(resp.read())
        except urllib.error.HTTPError as err:
            with err:
                return err.code, _json(err.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(f"cannot reach {self.base}: {reason}") from None

    def _request(
        self, method: str, path: str, body: JsonDict | None = None, headers: dict[str, str] | None = None
    ) -> urllib.request.Request:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        req.add_header(CHANNEL_HEADER, "live")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        if self.auth:
            req.add_header("Authorization", "Basic " + base64.b64encode(self.auth.encode()).decode())
        return req

    def send(self, agent: str, message: str, session_id: str | None) -> tuple[int, JsonDict]:
        """Post a live message to ``agent``, with an ``Idempotency-Key`` and ``Prefer: respond-async``.

        The server answers at once (``202 running`` and the turn's id); its worker runs the turn.

        When the answer is lost (the connection dropped or timed out) the same request is sent once
        more with the same key: the server answers the turn the first one started, never a second.
        """
        body: JsonDict = {"message": message, "live": True}
        if session_id:
            body["sessionId"] = session_id
        path = f"/agents/{quote(agent, safe='')}/messages"
        key = {"Idempotency-Key": secrets.token_hex(16), "Prefer": "respond-async"}
        try:
            return self.call("POST", path, body, headers=key)
        except Unreachable:
            return self.call("POST", path, body, headers=key)

    def events(self, turn_id: str, after: int, wait: float) -> tuple[int, JsonDict]:
        """The turn's events after ``after``, long-polled up to ``wait`` seconds."""
        path = f"/turns/{quote(turn_id, safe='')}/events?after={after}&wait={wait:g}"
        return self.call("GET", path, timeout=wait + self.timeout)

    def stream(self, turn_id: str, after: int, wait: float) -> Iterator[JsonDict]:
        """The turn's events after ``after`` as they come.

        A Server-Sent Events stream where the server streams (until the turn finishes or the server
        ends it), else the events of one long poll of up to ``wait`` seconds. Raises
        :class:`EventsFailed` or :class:`Unreachable`.
        """
        path = f"/turns/{quote(turn_id, safe='')}/events?after={after}&wait={wait:g}"
        req = self._request("GET", path)
        req.add_header("Accept", f"{STREAM}, application/json;q=0.5")  # replaces the JSON-only Accept
        try:
            resp: HTTPResponse = urllib.request.urlopen(req, timeout=wait + self.timeout)
        except urllib.error.HTTPError as err:
            with err:
                raise EventsFailed(err.code, _json(err.read())) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise Unreachable(f"cannot reach {self.base}: {getattr(exc, 'reason', exc)}") from None
        return _events(resp, self.base)

    def resolve(self, pending_id: str, body: JsonDict) -> tuple[int, JsonDict]:
        """Approve or deny one pending approval."""
        return self.call("POST", f"/pending-approvals/{quote(pending_id, safe='')}/resolve", body)

    def answer(self, pending_id: str, answer: str) -> tuple[int, JsonDict]:
        """Answer one pending question."""
        return self.call(
            "POST", f"/pending-questions/{quote(pending_id, safe='')}/answer", {"answer": answer}
        )


def wait_for_server(
    client: ChatClient,
    seconds: float = SERVER_WAIT_SECONDS,
    say: Callable[[str], object] = print,
    sleep: Callable[[float], object] = time.sleep,
) -> None:
    """Return once ``GET /health`` answers; retry (with backoff) for up to ``seconds`` while it does not.

    A server still starting (``loopengine dev`` warming its environments) gets that long: the first
    miss prints "waiting for loopengine dev at <url> ..." once. Raises :class:`Unreachable` at the end.
    """
    deadline, pause, told = time.monotonic() + seconds, 0.25, False
    while True:
        left = deadline - time.monotonic()
        try:
            client.call("GET", "/health", timeout=max(1.0, min(10.0, left)))
            return
        except Unreachable:
            if time.monotonic() + pause >= deadline:
                raise
        if not told:
            say(f"waiting for loopengine dev at {client.base} (up to {seconds:g} s) ...")
            told = True
        sleep(pause)
        pause = min(pause * 2, 2.0)


def _events(resp: HTTPResponse, base: str) -> Iterator[JsonDict]:
    """The events of one answer of the events route: its SSE frames, or its JSON's ``events``."""
    with resp:
        try:
            if resp.headers.get_content_type() != STREAM:
                yield from _json(resp.read()).get("events", [])
                return
            yield from _frames(resp)
        except (OSError, ValueError) as exc:  # the stream broke off (a reset, a timeout)
            raise Unreachable(f"lost the event stream from {base}: {exc}") from None


def _frames(resp: HTTPResponse) -> Iterator[JsonDict]:
    """Parse Server-Sent Events: each frame's ``data`` (JSON) as it arrives; ``event: error`` raises."""
    kind, data = "", []
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith(":"):
            continue
        if line:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                kind = value
            elif field == "data":
                data.append(value)
            continue
        if data:
            body = _json("\n".join(data).encode())
            if kind == "error":
                raise EventsFailed(500, body)
            yield body
        kind, data = "", []


def _json(raw: bytes) -> JsonDict:
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
