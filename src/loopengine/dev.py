"""``loopengine dev``: the api Lambda behind a real local HTTP server.

Each request becomes an API Gateway HTTP API (payload 2.0) event and goes through the very same
``handlers.api.handler`` a deployment runs; resumes run in-process on background threads. The store
is SQLite (``LOOPENGINE_DB``) unless ``LOOPENGINE_TABLE`` names a DynamoDB table. Parked turns live
in the store, so stopping and starting the server loses nothing. A background :class:`Sweeper`
runs the sweep (what the schedule Lambda does in AWS) every ``--sweep-interval`` seconds.
"""

from __future__ import annotations

import base64
import io
import json
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from loopengine import dev_guard as guard

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
TEXT_TYPES = ("application/json", "text/", "application/x-www-form-urlencoded")
LISTEN_BACKLOG = 1024
"""Pending connections the kernel queues for accept() (socketserver's default of 5 reset bursts)."""
MAX_BODY_BYTES = 256 * 1024
"""The API's body limit (``handlers.web.MAX_BODY_BYTES``): larger is 413 before a byte is read."""
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
    method: str, target: str, headers: dict[str, str], body: bytes, source_ip: str
) -> dict[str, Any]:
    """An API Gateway HTTP API v2 event for one request.

    Nothing is silently repaired: a text body that is not valid UTF-8 travels base64-encoded (as
    API Gateway sends binary), and a query string's invalid UTF-8 arrives as lone surrogates, so
    the handler sees the bad input and refuses it.
    """
    parts = urlsplit(target)
    lowered = {k.lower(): v for k, v in headers.items()}
    ctype = lowered.get("content-type", "application/json")
    is_text = not body or (any(ctype.startswith(t) for t in TEXT_TYPES) and _is_utf8(body))
    query = dict(parse_qsl(parts.query, keep_blank_values=True, errors="surrogateescape"))
    now = time.time()  # noqa: TID251 - the event's timestamp, like API Gateway stamps it
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


def make_server(
    port: int,
    handler: Handler,
    host: str = "127.0.0.1",
    quiet: bool = False,
    read_timeout: float = READ_TIMEOUT,
) -> ThreadingHTTPServer:
    """A threading HTTP server that forwards every request to ``handler`` (see :class:`Environments`).

    Requests pass :mod:`loopengine.dev_guard` first (Host, content type, size, read deadline).
    """
    allowed = guard.allowed_hosts(host)

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        reader: guard.DeadlineReader

        def setup(self) -> None:
            super().setup()
            self.reader = guard.DeadlineReader(self.connection, read_timeout)
            self.rfile = io.BufferedReader(self.reader)

        def handle_one_request(self) -> None:
            self.reader.restart()  # request line, headers and body within read_timeout
            super().handle_one_request()

        def _serve(self) -> None:
            refusal = guard.check_host(self.headers.get("host"), allowed)
            length = 0
            if refusal is None:
                length, refusal = guard.check_length(
                    self.headers.get_all("content-length") or [],
                    self.headers.get("transfer-encoding"),
                    MAX_BODY_BYTES,
                )
            if refusal is None:
                refusal = guard.check_content_type(self.command, self.path, self.headers.get("content-type"))
            if refusal is not None:
                self._refuse(refusal)
                return
            try:
                body = self.rfile.read(length) if length else b""
            except TimeoutError:
                self._refuse(guard.Refusal(408, "request_timeout", "the request body did not arrive in time"))
                return
            finally:
                self.connection.settimeout(read_timeout)  # for writing the answer
            if len(body) < length:  # the client went away mid-body
                self.close_connection = True
                return
            self._forward(body)

        def _forward(self, body: bytes) -> None:
            event = to_event(self.command, self.path, dict(self.headers), body, self.client_address[0])
            try:
                result = handler(event, LocalContext())
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
            if not quiet:
                method = self.command or "-"
                sys.stderr.write(f"  {method} {guard.safe_path(getattr(self, 'path', '') or '')} -> {code}\n")

        def log_message(self, format: str, *args: Any) -> None:
            pass  # errors' arguments may hold the raw request line (a token): only log_request prints

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("_BoundServer", (_Server,), {"address_family": family})
    server: ThreadingHTTPServer = server_class((host, port), Forward)
    return server


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent server handles Ctrl-C
    from handlers import api, root

    assert api.handler is not None
    root.engine()  # pay the cold start before the first request, like a provisioned environment


def _invoke(event: dict[str, Any]) -> dict[str, Any]:
    from handlers import api

    result: dict[str, Any] = api.handler(event, LocalContext())
    return result


def _sweep() -> tuple[int, int, int]:
    """One sweep in this environment (its re-invoked resumes run on its background threads)."""
    from handlers import root

    done = root.engine().sweep()
    return done.expired, done.recovered, done.notified


class Environments:
    """Worker processes standing in for Lambda execution environments: one event each at a time.

    Like Lambda, concurrency comes from more environments, not from threads in one: Powertools'
    resolver keeps the current event in shared state, so one process must never run two requests
    at once. Resumes run on background threads inside the environment that triggered them.
    """

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pool = context.Pool(count, initializer=_ignore_interrupts)

    def __call__(self, event: dict[str, Any], _context: Any) -> dict[str, Any]:
        """Run one event in a free environment (waits for one when all are busy)."""
        result: dict[str, Any] = self.pool.apply(_invoke, (event,))
        return result

    def sweep(self, timeout: float) -> tuple[int, int, int]:
        """Run one sweep in a free environment: (expired, recovered, notified)."""
        result: tuple[int, int, int] = self.pool.apply_async(_sweep).get(timeout)
        return result

    def close(self) -> None:
        """Stop every environment (background resumes in flight stop with them)."""
        self.pool.terminate()
        self.pool.join()


class Sweeper:
    """A parent thread that has an environment run the sweep every ``interval`` seconds.

    The first sweep runs at once (a restart picks up what the last run left behind); one runs at
    a time. A line is printed when a sweep did something, or failed; counts only.
    """

    def __init__(self, environments: Environments, interval: float) -> None:
        self.environments = environments
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sweeper", daemon=True)

    def start(self) -> None:
        """Start sweeping in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop after the sweep in progress, if any."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                expired, recovered, notified = self.environments.sweep(max(60.0, self.interval))
            except Exception as exc:  # the next sweep tries again
                if not self._stop.is_set():
                    print(f"  sweep failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            else:
                if expired or recovered or notified:
                    print(
                        f"  sweep: {expired} expired, {recovered} recovered, {notified} notified",
                        flush=True,
                    )
            self._stop.wait(self.interval)


def prepare_env(env: dict[str, str] | os._Environ[str]) -> list[str]:
    """Local defaults (anonymous access without admin auth, quiet observability); returns notes."""
    notes = []
    env.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    env.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    env.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    if not env.get("LOOPENGINE_ADMIN_AUTH"):
        env.setdefault("LOOPENGINE_ALLOW_ANONYMOUS", "1")
        notes.append("no LOOPENGINE_ADMIN_AUTH: routes accept anonymous callers (local only)")
    return notes


def serve(
    port: int,
    workers: int = 4,
    sweep_interval: float = 10.0,
    host: str = "127.0.0.1",
    read_timeout: float = READ_TIMEOUT,
) -> int:
    """Run until interrupted; sweep every ``sweep_interval`` seconds (0: never).

    Listens on ``host`` and answers requests whose Host header is loopback or ``host``; a client
    has ``read_timeout`` seconds to send each whole request.
    """
    from loopengine.bootstrap import timings

    timings(os.environ)  # a malformed setting fails here, once, not in every environment
    notes = prepare_env(os.environ)
    store = (
        f"DynamoDB table {os.environ['LOOPENGINE_TABLE']}"
        if os.environ.get("LOOPENGINE_TABLE")
        else (f"SQLite {os.environ.get('LOOPENGINE_DB') or '.loopengine/loopengine.db'}")
    )
    environments = Environments(workers)
    try:
        server = make_server(port, environments, host=host, read_timeout=read_timeout)
    except OSError as exc:
        environments.close()
        print(f"loopengine dev: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    sweeping = f"sweep every {sweep_interval:g}s" if sweep_interval > 0 else "no sweep"
    shown = f"[{host}]" if ":" in host else host
    print(f"loopengine dev: http://{shown}:{port}  (store: {store}, {workers} environments, {sweeping})")
    if host not in guard.LOOPBACK_HOSTS:
        names = ", ".join(sorted(guard.allowed_hosts(host) - guard.LOOPBACK_HOSTS))
        notes.append(
            f"listening beyond loopback: Host {names} is answered too; anyone who can reach it can call"
        )
    for note in notes:
        print(f"  note: {note}")
    print(json.dumps({"try": f"curl -s localhost:{port}/health"}), flush=True)
    sweeper = Sweeper(environments, sweep_interval) if sweep_interval > 0 else None
    if sweeper is not None:
        sweeper.start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        if sweeper is not None:
            sweeper.stop()
        server.server_close()
        environments.close()
    return 0
