"""The HTTP side of ``loopengine dev``: a local server that turns requests into API Gateway events.

:func:`make_server` answers each request by calling a handler with the API Gateway HTTP API
(payload 2.0) event :func:`to_event` makes of it, after :mod:`loopengine.local.dev_guard` has checked
it (Host, content type, size, read deadline); its log line shows no token or query string.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

from loopengine.local import dev_guard as guard
from loopengine.local import dev_stream

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
TEXT_TYPES = ("application/json", "text/", "application/x-www-form-urlencoded")
LISTEN_BACKLOG = 1024
"""Pending connections the kernel queues for accept() (socketserver's default of 5 reset bursts)."""
MAX_BODY_BYTES = 256 * 1024
"""The API's body limit (``loopengine.http.web.MAX_BODY_BYTES``): larger is 413 before a byte is read."""
READ_TIMEOUT = 10.0
"""Seconds a client has to send a whole request (``--read-timeout``)."""


@dataclass
class LocalContext:
    """The parts of a Lambda context the handlers read."""

    function_name: str = "loopengine-dev-api"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:local:000000000000:function:loopengine-dev-api"
    log_group_name: str = "/loopengine/dev"
    log_stream_name: str = "local"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    timeout_seconds: float = 29.0
    started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left of the (simulated) 29 s API budget."""
        return int(max(0.0, self.timeout_seconds - (time.monotonic() - self.started)) * 1000)


def to_event(
    method: str,
    target: str,
    headers: dict[str, str],
    body: bytes,
    source_ip: str,
    arrived: float | None = None,
) -> dict[str, Any]:
    """An API Gateway HTTP API v2 event for one request, stamped with its arrival (default: now).

    ``arrived`` (Unix seconds) becomes ``requestContext.timeEpoch``, from which the handler counts
    the request's time budget: the server stamps a request when it arrives, before it queues for an
    environment, as API Gateway stamps it before a cold start.

    Nothing is silently repaired: a text body that is not valid UTF-8 travels base64-encoded (as
    API Gateway sends binary), and a query string's invalid UTF-8 arrives as lone surrogates, so
    the handler sees the bad input and refuses it.
    """
    parts = urlsplit(target)
    lowered = {k.lower(): v for k, v in headers.items()}
    ctype = lowered.get("content-type", "application/json")
    is_text = not body or (any(ctype.startswith(t) for t in TEXT_TYPES) and _is_utf8(body))
    query = dict(parse_qsl(parts.query, keep_blank_values=True, errors="surrogateescape"))
    now = time.time() if arrived is None else arrived  # noqa: TID251 - the stamp, as API Gateway's
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path,
        "rawQueryString": parts.query,
        "headers": lowered,
        "queryStringParameters": query or None,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "local",
            "domainName": lowered.get("host", "127.0.0.1"),
            "http": {
                "method": method,
                "path": parts.path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": lowered.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "body": (body.decode("utf-8") if is_text else base64.b64encode(body).decode()) or None,
        "isBase64Encoded": not is_text,
    }


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class _Server(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line, no traceback (a client that went away is not the server's failure)."""
        sys.stderr.write(f"  connection error: {type(sys.exc_info()[1]).__name__}\n")


@dataclass(frozen=True)
class _Settings:
    """What one server's request handlers share."""

    handler: Handler
    allowed: frozenset[str]
    quiet: bool
    read_timeout: float


class _Forward(BaseHTTPRequestHandler):
    """Checks one request (:mod:`loopengine.local.dev_guard`), then forwards it to the handler."""

    protocol_version = "HTTP/1.1"
    settings: ClassVar[_Settings]
    reader: guard.DeadlineReader
    arrived: float

    def setup(self) -> None:
        """Read the connection through a deadline (``read_timeout`` per request)."""
        super().setup()
        self.reader = guard.DeadlineReader(self.connection, self.settings.read_timeout)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        """Serve one request: request line, headers and body within ``read_timeout``."""
        self.reader.restart()
        super().handle_one_request()

    def _serve(self) -> None:
        self.arrived = time.time()  # noqa: TID251 - the request's arrival: its budget counts from here
        length, refusal = self._check()
        if refusal is not None:
            self._refuse(refusal)
            return
        if self.command == "GET" and self.path.split("?", 1)[0] == "/health":
            self._health()  # answered here: never queued behind environments held by long-polls
            return
        if dev_stream.wants_stream(self.command, self.path, self.headers.get("accept")):
            self._stream()  # Server-Sent Events: a separate path (dev_stream)
            return
        try:
            body = self.rfile.read(length) if length else b""
        except TimeoutError:
            self._refuse(guard.Refusal(408, "request_timeout", "the request body did not arrive in time"))
            return
        finally:
            self.connection.settimeout(self.settings.read_timeout)  # for writing the answer
        if len(body) < length:  # the client went away mid-body
            self.close_connection = True
            return
        self._forward(body)

    def _check(self) -> tuple[int, guard.Refusal | None]:
        """The body's length, or why the request is refused (Host, size, content type)."""
        refusal = guard.check_host(self.headers.get("host"), self.settings.allowed)
        length = 0
        if refusal is None:
            length, refusal = guard.check_length(
                self.headers.get_all("content-length") or [],
                self.headers.get("transfer-encoding"),
                MAX_BODY_BYTES,
            )
        if refusal is None:
            refusal = guard.check_content_type(self.command, self.path, self.headers.get("content-type"))
        return length, refusal

    def _forward(self, body: bytes) -> None:
        ip = self.client_address[0]
        event = to_event(self.command, self.path, dict(self.headers), body, ip, self.arrived)
        try:
            result = self.settings.handler(event, LocalContext())
        except Exception as exc:  # the handler maps errors itself; this is a last resort
            sys.stderr.write(f"  handler failed: {type(exc).__name__}\n")
            msg = json.dumps({"error": "internal", "message": "internal error; see the server log"})
            result = {"statusCode": 500, "headers": {"content-type": "application/json"}, "body": msg}
        payload = result.get("body") or ""
        data = base64.b64decode(payload) if result.get("isBase64Encoded") else payload.encode()
        status = int(result.get("statusCode", 200))
        self.send_response(status)
        for name, value in (result.get("headers") or {}).items():
            self.send_header(name, value)
        for cookie in result.get("cookies") or []:
            self.send_header("Set-Cookie", cookie)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self) -> None:
        ip, headers, handler = self.client_address[0], dict(self.headers), self.settings.handler
        dev_stream.serve(
            self, lambda target: handler(to_event("GET", target, headers, b"", ip), LocalContext())
        )

    def _health(self) -> None:
        """``GET /health`` (the api's own answer, ``{"status": "ok"}``), without an environment."""
        data = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _refuse(self, refusal: guard.Refusal) -> None:
        """Answer without calling the handler; the unread body (if any) ends the connection."""
        data = json.dumps({"error": refusal.code, "message": refusal.message}).encode()
        self.close_connection = True
        self.send_response(refusal.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """One line per request: method, path without its query string, status."""
        if not self.settings.quiet:
            method = self.command or "-"
            sys.stderr.write(f"  {method} {guard.safe_path(getattr(self, 'path', '') or '')} -> {code}\n")

    def log_message(self, format: str, *args: Any) -> None:
        """Nothing: errors' arguments may hold the raw request line (a token); only log_request prints."""


def make_server(
    port: int,
    handler: Handler,
    host: str = "127.0.0.1",
    quiet: bool = False,
    read_timeout: float = READ_TIMEOUT,
) -> ThreadingHTTPServer:
    """A threading HTTP server that forwards every request to ``handler`` (see :class:`Environments`).

    Requests pass :mod:`loopengine.local.dev_guard` first (Host, content type, size, read deadline).
    """
    settings = _Settings(handler, guard.allowed_hosts(host), quiet, read_timeout)
    forward = type("Forward", (_Forward,), {"settings": settings})
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("_BoundServer", (_Server,), {"address_family": family})
    server: ThreadingHTTPServer = server_class((host, port), forward)
    return server
