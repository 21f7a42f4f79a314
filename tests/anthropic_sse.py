"""The Messages API's streaming form, for fakes: a reply as the Server-Sent Events the API sends.

:func:`sse_events` turns a whole Messages API reply (the JSON ``POST /v1/messages`` answers) into the
events ``"stream": true`` gets instead (``message_start``, per block ``content_block_start`` /
``content_block_delta``... / ``content_block_stop``, ``message_delta``, ``message_stop``), text cut
into ``piece``-character deltas and tool input into JSON fragments; :func:`encode` writes one event
as the wire has it. :class:`StreamingMessagesApi` serves replies that way on a loopback port, an
event at a time with ``gap`` seconds between events, so a reader sees the text arrive in pieces; with a
``meter`` (:class:`tests.token_meter.TokenMeter`) it bills each request as the API does, prompt cache
included, in the reply's ``usage``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.token_meter import TokenMeter, TooManyBreakpoints

JsonDict = dict[str, Any]


def text_reply(*texts: str, stop_reason: str = "end_turn") -> JsonDict:
    """A Messages API reply with one text block per ``texts``."""
    return {
        "id": "msg_stream",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": t} for t in texts],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 34},
    }


def sse_events(reply: JsonDict, piece: int = 4) -> list[tuple[str, JsonDict]]:
    """``reply`` as the stream of (event name, data) the API sends for it."""
    start = {**reply, "content": [], "stop_reason": None, "usage": {**reply["usage"], "output_tokens": 1}}
    events: list[tuple[str, JsonDict]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(reply["content"]):
        if block["type"] == "text":
            empty: JsonDict = {"type": "text", "text": ""}
            deltas = [
                {"type": "text_delta", "text": block["text"][i : i + piece]}
                for i in range(0, len(block["text"]), piece)
            ]
        elif block["type"] == "tool_use":
            empty = {**block, "input": {}}
            raw = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": raw[i : i + piece]}
                for i in range(0, len(raw), piece)
            ]
        else:
            empty = block
            deltas = []
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": empty})
        )
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    usage = {"output_tokens": reply["usage"]["output_tokens"]}
    delta = {"stop_reason": reply["stop_reason"], "stop_sequence": reply.get("stop_sequence")}
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def encode(name: str, data: JsonDict) -> bytes:
    """One event as the wire has it."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def sse_body(reply: JsonDict, piece: int = 4) -> bytes:
    """The whole streamed answer to one request."""
    return b"".join(encode(name, data) for name, data in sse_events(reply, piece))


class StreamingMessagesApi:
    """``POST /v1/messages`` on 127.0.0.1: ``reply(n, body)`` answers the n-th request (1-based).

    A request with ``"stream": true`` gets Server-Sent Events, one every ``gap`` seconds (``cut_after``:
    the connection drops after that many events); any other gets the JSON reply. ``bodies`` keeps
    what was sent. ``meter``: each reply's ``usage`` is its bill (a request with more than four
    breakpoints is the API's 400).
    """

    def __init__(
        self,
        reply: Callable[[int, JsonDict], JsonDict],
        gap: float = 0.0,
        piece: int = 4,
        cut_after: int | None = None,
        meter: TokenMeter | None = None,
    ) -> None:
        self.reply, self.gap, self.piece, self.cut_after = reply, gap, piece, cut_after
        self.meter = meter
        self.bodies: list[JsonDict] = []
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handle(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                with api._lock:
                    api.bodies.append(body)
                    n = len(api.bodies)
                answer, status = api.reply(n, body), 200
                if api.meter is not None:
                    try:
                        answer = {**answer, "usage": api.meter.bill(body, answer)}
                    except TooManyBreakpoints as exc:  # refused before any stream starts
                        error = {"type": "invalid_request_error", "message": str(exc)}
                        answer, status = {"type": "error", "error": error}, 400
                if status != 200 or not body.get("stream"):
                    data = json.dumps(answer).encode()
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("request-id", f"req_{n}")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    api._send(self, sse_events(answer, api.piece))
                except (BrokenPipeError, ConnectionResetError):
                    return

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handle

    def _send(self, handle: BaseHTTPRequestHandler, events: list[tuple[str, JsonDict]]) -> None:
        for i, (name, data) in enumerate(events):
            if self.cut_after is not None and i >= self.cut_after:
                return
            if i and self.gap:
                time.sleep(self.gap)
            handle.wfile.write(encode(name, data))
            handle.wfile.flush()
        self.finished.set()

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
