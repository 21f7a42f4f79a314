"""A real local webhook receiver that verifies what it is sent (demos and tests).

    with WebhookReceiver(secret) as rx:
        notifier = WebhookNotifier(rx.url, secret, clock=SystemClock())
        ...                                   # run something that notifies
        hit = rx.wait_for("approval")         # blocks until an approval arrived
        assert hit.verified

It serves ``http.server`` on 127.0.0.1 at a free port from a daemon thread. For each POST it reads
the raw body, picks the signature header by the body's ``event`` and runs
:func:`~loopengine.channels.signing.verify_webhook` on the raw bytes, then answers:

    204  signature valid
    401  signature missing, malformed, stale or wrong
    400  body is not a JSON object with a known ``event``
    411  no Content-Length (not recorded)
    413  body larger than ``MAX_BODY`` bytes (not recorded)

Every recorded request (valid or not) lands in :attr:`WebhookReceiver.received`. Standard library
only; nothing is logged to stderr.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from loopengine.channels.signing import (
    DEFAULT_TOLERANCE,
    SIGNATURE_HEADERS,
    WebhookVerificationError,
    verify_webhook,
)
from loopengine.domain.base.clock import Clock

MAX_BODY = 1 << 20


@dataclass(frozen=True)
class ReceivedWebhook:
    """One POST the receiver got.

    ``event`` is the body's ``event`` ('' when unreadable), ``header`` the signature header checked
    (``None`` when no event could be read), ``reason`` why verification failed (``None`` if valid).
    """

    event: str
    payload: dict[str, Any]
    verified: bool
    header: str | None
    reason: str | None = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a stuck request never keeps the interpreter alive ...
    block_on_close = True  # ... but close() still waits for in-flight requests
    receiver: WebhookReceiver


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "loopengine-receiver/0.1"
    timeout = 10  # seconds a silent client may hold a request thread

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: the default logs every request to stderr."""

    def do_POST(self) -> None:
        """Verify one webhook and answer 204, 401, 400, 411 or 413."""
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._answer(HTTPStatus.LENGTH_REQUIRED, "Content-Length required")
            return
        if length < 0 or length > MAX_BODY:
            self._answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body too large")
            return
        body = self.rfile.read(length)
        record = self.server.receiver._check(body, self.headers.get)
        self.server.receiver._record(record)
        if record.verified:
            self._answer(HTTPStatus.NO_CONTENT)
        elif record.header is None:
            self._answer(HTTPStatus.BAD_REQUEST, record.reason or "bad request")
        else:
            self._answer(HTTPStatus.UNAUTHORIZED, record.reason or "unauthorized")

    def _answer(self, status: HTTPStatus, error: str | None = None) -> None:
        data = b"" if error is None else json.dumps({"error": error}).encode("utf-8")
        self.send_response(status)
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)


class WebhookReceiver:
    """A verifying webhook endpoint on ``127.0.0.1``; use it as a context manager."""

    def __init__(
        self,
        secret: str,
        *,
        clock: Clock | None = None,
        tolerance: int = DEFAULT_TOLERANCE,
    ) -> None:
        """Verify with ``secret`` (``ValueError`` when empty); ``clock`` defaults to the system clock."""
        if not secret:
            raise ValueError("WebhookReceiver needs a non-empty secret: an empty one accepts forgeries")
        self._secret = secret
        self._clock = clock
        self._tolerance = tolerance
        self._received: list[ReceivedWebhook] = []
        self._claimed: set[int] = set()
        self._cond = threading.Condition()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> WebhookReceiver:
        """Bind a free port and start serving in a daemon thread (idempotent)."""
        if self._server is None:
            server = _Server(("127.0.0.1", 0), _Handler)
            server.receiver = self
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="webhook-receiver",
                daemon=True,
            )
            thread.start()
            self._server, self._thread = server, thread
        return self

    def close(self) -> None:
        """Stop serving, close the socket and join the threads (idempotent)."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> WebhookReceiver:
        """Start the server."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server."""
        self.close()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>/webhook`` — where to point a WebhookNotifier."""
        if self._server is None:
            raise RuntimeError("WebhookReceiver is not running; use it as a context manager")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/webhook"

    # -- what arrived ----------------------------------------------------------------------

    @property
    def received(self) -> list[ReceivedWebhook]:
        """Everything recorded so far, in arrival order (a copy)."""
        with self._cond:
            return list(self._received)

    def wait_for(self, event: str, timeout: float = 5) -> ReceivedWebhook:
        """Return the earliest ``event`` webhook that no earlier ``wait_for`` returned.

        Blocks until one arrives, so a demo that expects two approvals can wait for each in
        turn. Invalid deliveries count too (check ``verified``). Raises ``TimeoutError`` when
        nothing matching arrives within ``timeout`` seconds.
        """

        def unclaimed() -> int | None:
            for index, record in enumerate(self._received):
                if record.event == event and index not in self._claimed:
                    return index
            return None

        with self._cond:
            if not self._cond.wait_for(lambda: unclaimed() is not None, timeout):
                raise TimeoutError(f"no {event!r} webhook arrived within {timeout:g} s")
            index = unclaimed()
            assert index is not None  # still under the lock the predicate ran under
            self._claimed.add(index)
            return self._received[index]

    # -- used by the handler thread --------------------------------------------------------

    def _check(self, body: bytes, get_header: Callable[[str], str | None]) -> ReceivedWebhook:
        try:
            payload = json.loads(body)
        except ValueError:
            return ReceivedWebhook("", {}, False, None, "body is not JSON")
        if not isinstance(payload, dict):
            return ReceivedWebhook("", {}, False, None, "body is not a JSON object")
        event = payload.get("event")
        if not isinstance(event, str) or event not in SIGNATURE_HEADERS:
            return ReceivedWebhook(str(event or ""), payload, False, None, "unknown event")
        header = SIGNATURE_HEADERS[event]
        now = None if self._clock is None else self._clock.now()
        try:
            verify_webhook(self._secret, body, get_header(header), now=now, tolerance=self._tolerance)
        except WebhookVerificationError as exc:
            return ReceivedWebhook(event, payload, False, header, str(exc.reason))
        return ReceivedWebhook(event, payload, True, header)

    def _record(self, record: ReceivedWebhook) -> None:
        with self._cond:
            self._received.append(record)
            self._cond.notify_all()
