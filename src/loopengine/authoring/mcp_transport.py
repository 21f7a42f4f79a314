"""How an MCP server of agent.yaml is reached: streamable HTTP (``url``) or stdio (``command``).

The checks of an ``mcp_servers:`` entry's transport keys, apart from the rest of the entry
(:class:`~loopengine.authoring.mcp.McpServerModel`):

    url          an http(s) URL with no credentials and no fragment
    headers_env  (url only) request headers read from environment variables; never one the
                 transport sets itself, and over plain http only to this machine
    command      (stdio) the argument list of the server's process: ``[mcp-server-time, --local-
                 timezone, UTC]``; never run through a shell. ``python`` as the first word is the
                 Python that runs loopengine (``python -m package``: a deployment's own packages)
    env          (command only) literal variables of the child's environment
    env_from     (command only) variables of the child's environment read from this process's
                 (secrets: read at start, never stored)

Exactly one of ``url`` and ``command``. The child inherits only a few harmless variables of this
process (``PATH``, ``HOME``, ...; the ``mcp`` SDK's default), never its credentials: whatever else
it needs is named in ``env`` / ``env_from``.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

RESERVED_HEADERS = ("host", "content-length", "content-type", "accept", "connection", "transfer-encoding")
"""Headers the transport sets itself (and every ``mcp-*`` header): not settable through ``headers_env``."""
MAX_COMMAND_WORDS = 64


def _url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL of a streamable HTTP MCP endpoint")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry credentials; put them in headers_env")
    if parts.fragment:
        raise ValueError("must not have a #fragment")
    return url


def _headers(headers: dict[str, str]) -> dict[str, str]:
    for name in headers:
        low = name.lower()
        if low in RESERVED_HEADERS or low.startswith("mcp-"):
            raise ValueError(f"header {name!r} is set by the MCP transport itself")
    return headers


def _command(words: list[str]) -> list[str]:
    if any("\0" in word for word in words):
        raise ValueError("a word of the command holds a NUL character")
    if not words[0].strip():
        raise ValueError("the first word must name the program to start")
    return words


HeaderName = Annotated[str, Field(pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
Url = Annotated[str, Field(min_length=1), AfterValidator(_url)]
Headers = Annotated[dict[HeaderName, EnvName], AfterValidator(_headers)]
Command = Annotated[
    list[Annotated[str, Field(min_length=1)]],
    Field(min_length=1, max_length=MAX_COMMAND_WORDS),
    AfterValidator(_command),
]


def transport_problem(
    url: str | None,
    command: list[str] | None,
    headers_env: dict[str, str] | None,
    env: dict[str, str] | None,
    env_from: dict[str, str] | None,
) -> str | None:
    """What is wrong with an entry's transport keys taken together, or None."""
    if (url is None) == (command is None):
        return "needs exactly one of url (a streamable HTTP server) or command (a server started over stdio)"
    if command is not None and headers_env:
        return "headers_env is for a url server; a command server takes env and env_from"
    if url is not None and (env or env_from):
        return "env and env_from are for a command server; a url server takes headers_env"
    both = sorted(set(env or {}) & set(env_from or {}))
    if both:
        return f"{', '.join(both)} is set by both env and env_from"
    if headers_env and url and urlsplit(url).scheme == "http" and not _loopback(url):
        return (
            "headers_env over plain http would send the secrets in clear text; use https "
            "(plain http is allowed only to this machine: localhost, 127.0.0.1, ::1)"
        )
    return None


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
