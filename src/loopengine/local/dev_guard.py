"""What ``loopengine dev`` checks before a request reaches the handler (issue 8).

A local server with anonymous access is reachable from every web page the developer visits, so:

- **Host** (DNS rebinding): only ``127.0.0.1``, ``localhost`` and ``[::1]`` (any port), plus the
  name or address given with ``--host``, are answered; anything else is 421, no handler call.
- **Content type** (cross-site POST): a page can POST ``text/plain`` or a form anywhere without
  a preflight, but not ``application/json``; so every request that is not a GET/HEAD must say
  ``Content-Type: application/json``, except on the form routes (``/magic/*``,
  ``/integrations/*``, ``/inbox/items/*``), which carry their own token or signature (the
  inbox: a per-principal, per-item form token and an origin check). Otherwise 415.
- **Size and pace**: a Content-Length over the limit is 413 before a byte of the body is read;
  chunked uploads are 411; the whole request (request line, headers and body) must arrive
  within the read timeout (:class:`DeadlineReader`), so a client that trickles bytes cannot
  hold a thread.
- **Logs**: a request is logged as method, :func:`safe_path` and status only; never headers, the
  query string or a magic-link token.

Standard library only.
"""

from __future__ import annotations

import io
import ipaddress
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})
FORM_PREFIXES = ("/magic/", "/integrations/", "/inbox/items/")
SAFE_METHODS = frozenset({"GET", "HEAD"})
SECRET_PREFIXES = ("/magic/",)
"""Paths whose remainder is a bearer token: logged as ``<prefix><redacted>``."""


@dataclass(frozen=True)
class Refusal:
    """A request refused before the handler: status, error code, message, and ``Connection: close``."""

    status: int
    code: str
    message: str


def allowed_hosts(bind: str) -> frozenset[str]:
    """Host names answered when listening on ``bind``: loopback, plus ``bind`` itself.

    A wildcard bind (``0.0.0.0``, ``::``) adds this machine's host name, so a LAN client that
    uses it is answered; an address or name typed by a rebinding attacker's page still is not.
    """
    extra: Iterable[str] = [bind]
    if bind in WILDCARD_BINDS:
        extra = {socket.gethostname(), socket.getfqdn()}
    return LOOPBACK_HOSTS | {_normal(h) for h in extra if h}


def host_name(header: str | None) -> str | None:
    """The name in a Host header (``name[:port]`` or ``[v6][:port]``), lower-cased; None if malformed."""
    value = (header or "").strip()
    if not value:
        return None
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else rest
        if not sep or (rest and not rest.startswith(":")):
            return None
    else:
        name, _, port = value.partition(":")
    if port and not (port.isascii() and port.isdigit()):
        return None
    return _normal(name) or None


def _normal(name: str) -> str:
    name = name.strip().lower().strip("[]")
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def check_host(header: str | None, allowed: frozenset[str]) -> Refusal | None:
    """421 unless the Host header names an allowed host."""
    if host_name(header) in allowed:
        return None
    return Refusal(
        421,
        "misdirected_request",
        "loopengine dev answers only Host 127.0.0.1, localhost or [::1] (or the --host it listens on)",
    )


def is_form_route(path: str) -> bool:
    """Whether ``path`` is a form route (magic links, chat integrations, the inbox's decisions)."""
    return any(path.startswith(p) for p in FORM_PREFIXES)


def check_content_type(method: str, path: str, content_type: str | None) -> Refusal | None:
    """415 for a non-GET request to a JSON route whose media type is not ``application/json``."""
    if method in SAFE_METHODS or is_form_route(path.split("?", 1)[0]):
        return None
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/json":
        return None
    return Refusal(415, "unsupported_media_type", "send the request body with Content-Type: application/json")


def check_length(
    content_length: list[str], transfer_encoding: str | None, limit: int
) -> tuple[int, Refusal | None]:
    """The body's length from its headers, or why it is refused (nothing has been read yet)."""
    if transfer_encoding:
        return 0, Refusal(411, "length_required", "chunked uploads are not accepted; send Content-Length")
    if not content_length:
        return 0, None
    values = {v.strip() for v in content_length}
    raw = values.pop()
    if values or not (raw.isascii() and raw.isdigit()):
        return 0, Refusal(400, "bad_request", "Content-Length must be one non-negative integer")
    length = int(raw)
    if length > limit:
        return 0, Refusal(413, "too_large", f"request body is over {limit} bytes")
    return length, None


def safe_path(target: str) -> str:
    """``target`` fit for a log line: no query string, no magic-link token."""
    path, sep, _query = target.partition("?")
    plain = unquote(path).lower()
    for prefix in SECRET_PREFIXES:
        if prefix in plain:  # also //magic/..., /%6Dagic/...: whatever might reach the route
            path = f"{prefix}<redacted>"
    if any(ch < " " or ch == "\x7f" for ch in path):  # no control characters in the log
        path = "<unprintable path>"
    return path[:200] + ("?<query redacted>" if sep else "")


class DeadlineReader(io.RawIOBase):
    """A socket reader that fails once a deadline passes, however slowly bytes trickle in.

    A socket timeout alone bounds each ``recv``; a client sending one byte a second would still
    hold the thread for as long as it likes. :meth:`restart` sets the deadline for a new request.
    """

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        super().__init__()
        self.sock, self.seconds = sock, seconds
        self.deadline = time.monotonic() + seconds

    def restart(self) -> None:
        """The next request has ``seconds`` to arrive."""
        self.deadline = time.monotonic() + self.seconds

    def readable(self) -> bool:
        """Always readable."""
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        """Receive into ``buffer``; ``TimeoutError`` once the deadline has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)
