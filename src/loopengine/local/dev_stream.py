"""Server-Sent Events for ``GET /turns/{turnId}/events`` in ``loopengine dev`` (the live channel).

API Gateway's HTTP API cannot stream, so there the route answers the long-poll JSON whatever the
``Accept`` header says. ``loopengine dev`` can: a request that accepts ``text/event-stream`` is
answered here, by asking the same api handler (in an execution environment, with the caller's own
headers, so auth and tenant isolation are the route's) for the events after the last ``seq`` sent,
again and again, and writing each as it arrives::

    event: <type>
    data: <the event as JSON, with seq, type, at, ...>
    id: <seq>

until the turn has finished or the client goes away. The environments are never held waiting:
each ask is ``wait=0`` and the pause between asks (50 ms growing to 0.5 s) happens here, in the
request's own thread. A comment line (``: keep-alive``) goes out every 15 s of silence. A client
reconnecting with ``Last-Event-ID`` continues after that event.
"""

from __future__ import annotations

import json
import re
import select
import socket
import sys
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

Call = Callable[[str], dict[str, Any]]
"""Run ``GET <target>`` through the api handler; the Lambda proxy result."""

EVENTS_PATH = re.compile(r"^/turns/[^/]+/events$")
HEARTBEAT_SECONDS = 15.0
FIRST_PAUSE, MAX_PAUSE = 0.05, 0.5


def wants_stream(method: str, target: str, accept: str | None) -> bool:
    """Whether this request is for the events route and accepts an event stream."""
    path = urlsplit(target).path
    return method == "GET" and bool(EVENTS_PATH.match(path)) and "text/event-stream" in (accept or "")


def serve(request: BaseHTTPRequestHandler, call: Call) -> None:
    """Answer one streaming request on ``request``'s connection (errors as the route's JSON)."""
    call = _safe(call)
    parts = urlsplit(request.path)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.pop("wait", None)
    if "after" not in query and request.headers.get("last-event-id"):
        query["after"] = request.headers["last-event-id"]
    first = call(_target(parts.path, query))
    if int(first.get("statusCode", 200)) != 200:
        _reply(request, first)
        return
    request.close_connection = True
    request.send_response(200)
    request.send_header("Content-Type", "text/event-stream; charset=utf-8")
    request.send_header("Cache-Control", "no-cache")
    request.send_header("Connection", "close")
    request.end_headers()
    try:
        _pump(request, call, parts.path, query, first)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):  # the client went away
        return


def _pump(
    request: BaseHTTPRequestHandler, call: Call, path: str, query: dict[str, str], result: dict[str, Any]
) -> None:
    pause, quiet_since = FIRST_PAUSE, time.monotonic()
    while True:
        if int(result.get("statusCode", 200)) != 200:
            _write(request, "event: error\ndata: " + (result.get("body") or "{}") + "\n\n")
            return
        body = json.loads(result.get("body") or "{}")
        for event in body.get("events", []):
            data = json.dumps(event, separators=(",", ":"))
            _write(request, f"event: {event.get('type')}\ndata: {data}\nid: {event.get('seq')}\n\n")
            quiet_since, pause = time.monotonic(), FIRST_PAUSE
        query["after"] = str(body.get("next", query.get("after", 0)))
        if body.get("finished"):
            return
        if time.monotonic() - quiet_since >= HEARTBEAT_SECONDS:
            _write(request, ": keep-alive\n\n")
            quiet_since = time.monotonic()
        if _gone(request, pause):
            return
        pause = min(pause * 2, MAX_PAUSE)
        result = call(_target(path, query))


def _safe(call: Call) -> Call:
    """``call`` whose failure is a 500 JSON result (the handler maps errors itself; a last resort)."""

    def run(target: str) -> dict[str, Any]:
        try:
            return call(target)
        except Exception as exc:
            sys.stderr.write(f"  event stream failed: {type(exc).__name__}: {exc}\n")
            body = json.dumps({"error": "internal", "message": "internal error; see the server log"})
            return {"statusCode": 500, "headers": {"content-type": "application/json"}, "body": body}

    return run


def _target(path: str, query: dict[str, str]) -> str:
    return f"{path}?{urlencode({**query, 'wait': '0'})}"


def _write(request: BaseHTTPRequestHandler, text: str) -> None:
    request.wfile.write(text.encode("utf-8"))
    request.wfile.flush()


def _gone(request: BaseHTTPRequestHandler, seconds: float) -> bool:
    """Wait ``seconds``; True as soon as the client closed its end of the connection."""
    sock = request.connection
    readable, _, _ = select.select([sock], [], [], seconds)
    if not readable:
        return False
    try:
        closed: bool = sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
    if not closed:  # the client sent something more: not a close; still pause
        time.sleep(seconds)
    return closed


def _reply(request: BaseHTTPRequestHandler, result: dict[str, Any]) -> None:
    data = (result.get("body") or "").encode()
    request.send_response(int(result.get("statusCode", 200)))
    for name, value in (result.get("headers") or {}).items():
        request.send_header(name, value)
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)
