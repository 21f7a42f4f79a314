"""A stand-in HTTP server on 127.0.0.1 for the channels' outgoing POSTs (Slack's, Lark's, a response_url).

:class:`PostServer` is a real ``ThreadingHTTPServer`` on a free port, served from a thread while it
is used as a context manager; a subclass says what each POST gets (:meth:`PostServer.respond`: the
path, the headers with lower-cased names, the raw body) and records what it needs.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass(frozen=True)
class Answer:
    """What the stand-in sends back: a status, a body and its headers."""

    body: bytes
    status: int = 200
    content_type: str | None = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    """One request the stand-in got (its JSON body parsed)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a request still sleeping (a timeout test) never blocks close()
    owner: PostServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet."""

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        answer = self.server.owner.respond(self.path, headers, raw)
        self.send_response(answer.status)
        if answer.content_type is not None:
            self.send_header("Content-Type", answer.content_type)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body)


class PostServer:
    """A stand-in HTTP server (a context manager) whose :meth:`respond` answers every POST."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def respond(self, path: str, headers: dict[str, str], raw: bytes) -> Answer:
        """What a POST to ``path`` gets (``headers``' names lower-cased, ``raw`` its body)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
