"""The MCP client: list a server's tools, call one under its pin, over streamable HTTP (the ``mcp`` SDK).

:class:`McpClient` is the :class:`~loopengine.authoring.mcp.McpConnector` of a deployment: a server
with a ``command`` goes to :mod:`loopengine.mcp.stdio` (a child process kept for the life of the
process; imported, with ``asyncio``, when a stdio server is first used), any other to
:class:`HttpMcpConnector`.
Every operation opens a session of its own (connect, negotiate, list; for a call also compare the
pinned hash and send ``tools/call`` once), so a listing at turn start and a call days later share
nothing but the turn's pinned config. The SDK's own re-send after a ``HEADER_MISMATCH`` is not used:
one approved call is one request.

How a call ends, by when it failed:

    before tools/call was sent        McpNotRun: "<server> server unreachable: not run",
                                      "... tool changed since this turn started; not run", ...
    the server refused the request    McpNotRun: a JSON-RPC rejection (unknown method, invalid
                                      params, header mismatch) means the tool did not run
    after it was sent, no answer      ToolOutcomeUnknown: timeout, dropped connection, an answer
                                      that cannot be read; never re-sent
    an answer                         McpAnswer (``is_error`` when the tool reported a failure)

Header values are read from the environment at each operation, sent only as request headers, and
scrubbed from every text this module produces (errors and answers alike). The ``mcp`` SDK is
imported on first use, so building a runtime does not load it (nor ``asyncio``: a handler's cold
import does not need it).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from loopengine.authoring.mcp import ListedTool, McpAnswer, McpConnector, McpNotRun, McpPin, McpServer
from loopengine.domain.base.errors import ToolOutcomeUnknown
from loopengine.domain.base.jsontypes import JsonDict

if TYPE_CHECKING:
    from loopengine.mcp.stdio import StdioMcpConnector

T = TypeVar("T")

MAX_PAGES = 20
"""Pages of ``tools/list`` read before giving up on a server that never stops paginating."""
REFUSED = (-32601, -32602, -32020)
"""JSON-RPC errors that reject a request before any tool runs: method not found, invalid params,
header mismatch (``mcp_types``' METHOD_NOT_FOUND, INVALID_PARAMS, HEADER_MISMATCH)."""
MAX_ERROR_CHARS = 300


class McpClient:
    """List and call MCP tools over each server's transport (``env``: header and ``env_from`` variables).

    ``connect_timeout`` / ``timeout`` override the HTTP servers' own (``--check``'s short wait for a
    remote server that may be down); a stdio server keeps its own: a missing program fails at once,
    and a present one takes the seconds its interpreter needs to start.
    """

    def __init__(
        self, env: Mapping[str, str], *, connect_timeout: float | None = None, timeout: float | None = None
    ) -> None:
        self._env = env
        self.http = HttpMcpConnector(env, connect_timeout=connect_timeout, timeout=timeout)
        self._stdio: StdioMcpConnector | None = None

    def _for(self, server: McpServer) -> McpConnector:
        if not server.command:
            return self.http
        if self._stdio is None:
            from loopengine.mcp.stdio import StdioMcpConnector

            self._stdio = StdioMcpConnector(self._env)
        return self._stdio

    def list_tools(self, server: McpServer) -> list[ListedTool]:
        """Every tool ``server`` lists now; ``McpNotRun`` when it cannot be reached or listed."""
        return self._for(server).list_tools(server)

    def call_tool(self, server: McpServer, pin: McpPin, args: JsonDict) -> McpAnswer:
        """Call the pinned tool once, if the server still lists it with the pinned hash."""
        return self._for(server).call_tool(server, pin, args)


class BaseConnector:
    """What the HTTP and stdio connectors share: ``env``, the timeout overrides, a listing's deadline.

    ``connect_timeout`` / ``timeout`` override every server's own. A server's ``timeout`` bounds
    each operation as a whole, connecting (or starting) and listing included.
    """

    def __init__(
        self, env: Mapping[str, str], *, connect_timeout: float | None = None, timeout: float | None = None
    ) -> None:
        self._env = env
        self._connect_timeout = connect_timeout
        self._timeout = timeout

    def _secrets(self, server: McpServer) -> dict[str, str]:
        """The values this transport sends ``server`` and scrubs from every text (headers, env_from)."""
        raise NotImplementedError

    def _call_secrets(self, server: McpServer) -> dict[str, str]:
        """:meth:`_secrets` for a call: a missing one is ``McpNotRun`` ("...: not run")."""
        try:
            return self._secrets(server)
        except McpNotRun as exc:
            raise McpNotRun(f"{exc}: not run") from None

    def _total(self, server: McpServer) -> float:
        """The whole operation's deadline (connect, list, call): the server's ``timeout``."""
        return self._timeout if self._timeout is not None else server.timeout

    def _connect(self, server: McpServer) -> float:
        """The deadline to connect (or start): the server's ``connect_timeout``, within the whole's."""
        connect = self._connect_timeout if self._connect_timeout is not None else server.connect_timeout
        return min(connect, self._total(server))

    async def _listed(
        self, server: McpServer, secrets: dict[str, str], listing: Callable[[], Awaitable[list[ListedTool]]]
    ) -> list[ListedTool]:
        """``listing()`` within the operation's deadline; any failure is ``McpNotRun`` (unreachable)."""
        import anyio

        try:
            with anyio.fail_after(self._total(server)):
                return await listing()
        except Exception as exc:
            why = _scrub(_why(exc), secrets)
            raise McpNotRun(f"the {server.name} MCP server is unreachable ({why})") from None


class HttpMcpConnector(BaseConnector):
    """List and call MCP tools over streamable HTTP; ``env`` holds the header variables.

    ``connect_timeout`` / ``timeout`` override every server's own (``loopengine agents --check``
    probes with short ones).
    """

    def __init__(
        self, env: Mapping[str, str], *, connect_timeout: float | None = None, timeout: float | None = None
    ) -> None:
        super().__init__(env, connect_timeout=connect_timeout, timeout=timeout)
        self._tls: Any = None
        self._lock = threading.Lock()

    def _tls_context(self) -> Any:
        """One TLS context for every session (building one reads the CA bundle: ~0.2 s each time)."""
        import httpx2

        with self._lock:
            if self._tls is None:
                self._tls = httpx2.create_ssl_context()
            return self._tls

    def list_tools(self, server: McpServer) -> list[ListedTool]:
        """Every tool ``server`` lists now; ``McpNotRun`` when it cannot be reached or listed."""
        headers = self._secrets(server)
        return _run(lambda: self._list(server, headers))

    def call_tool(self, server: McpServer, pin: McpPin, args: JsonDict) -> McpAnswer:
        """Call the pinned tool once, if the server still lists it with the pinned hash."""
        headers = self._call_secrets(server)
        return _run(lambda: self._call(server, pin, args, headers))

    def _secrets(self, server: McpServer) -> dict[str, str]:
        return server.headers(self._env)

    async def _list(self, server: McpServer, headers: dict[str, str]) -> list[ListedTool]:
        async def listing() -> list[ListedTool]:
            async with self._client(server, headers) as client:
                return await _listing(client)

        return await self._listed(server, headers, listing)

    async def _call(
        self, server: McpServer, pin: McpPin, args: JsonDict, headers: dict[str, str]
    ) -> McpAnswer:
        answer: McpAnswer | None = None
        sent = False
        import anyio

        try:
            with anyio.fail_after(self._total(server)):
                async with self._client(server, headers) as client:
                    _check_pin(server, pin, await _listing(client))
                    sent = True
                    answer = _answer(await client.session.call_tool(pin.tool, args), headers)
        except Exception as exc:
            if answer is not None:  # the answer came; closing the session failed after it
                return answer
            raise _failure(exc, server, pin, sent, headers) from None
        return answer

    @asynccontextmanager
    async def _client(self, server: McpServer, headers: dict[str, str]) -> Any:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        total, connect = self._total(server), self._connect(server)
        timeout = httpx2.Timeout(total, connect=connect, pool=connect)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout, verify=self._tls_context()) as http:
            transport = streamable_http_client(server.url, http_client=http)
            async with Client(transport, read_timeout_seconds=total, cache=None) as client:
                yield client


async def _listing(client: Any) -> list[ListedTool]:
    tools: list[ListedTool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            tools.append(ListedTool(tool.name, tool.description or "", dict(tool.input_schema)))
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise RuntimeError(f"tools/list did not end within {MAX_PAGES} pages")


def _check_pin(server: McpServer, pin: McpPin, listed: list[ListedTool]) -> None:
    """Raise ``McpNotRun`` unless the server lists the pinned tool exactly as the turn pinned it."""
    current = next((t for t in listed if t.name == pin.tool), None)
    if current is None:
        raise McpNotRun(f"the {server.name} server no longer offers its {pin.tool} tool; not run")
    if current.schema_hash() != pin.schema_hash:
        raise McpNotRun(
            f"the {server.name} server's {pin.tool} tool changed since this turn started; not run"
        )


def _failure(
    exc: Exception, server: McpServer, pin: McpPin, sent: bool, headers: dict[str, str]
) -> Exception:
    """The error a failed call is recorded as (see the module docstring)."""
    leaves = _leaves(exc)
    not_run = next((e for e in leaves if isinstance(e, McpNotRun)), None)
    if not_run is not None:
        return not_run
    why = _scrub(_why(exc), headers)
    if not sent or all(_unconnected(e) for e in leaves):
        return McpNotRun(f"{server.name} server unreachable: not run ({why})")
    refused = next((e for e in leaves if getattr(e, "code", None) in REFUSED), None)
    if refused is not None:
        return McpNotRun(f"the {server.name} server refused the {pin.tool} call ({why}); not run")
    return ToolOutcomeUnknown(
        f"the {pin.tool} call was sent to the {server.name} server and no answer came back ({why}); "
        "it may have taken effect and was not retried"
    )


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _unconnected(exc: BaseException) -> bool:
    """A connection that never opened: the request cannot have reached the server."""
    return type(exc).__name__ in ("ConnectError", "ConnectTimeout")


def _why(exc: BaseException) -> str:
    leaf = _leaves(exc)[0]
    text = f"{type(leaf).__name__}: {leaf}" if str(leaf) else type(leaf).__name__
    return text[:MAX_ERROR_CHARS]


def _answer(result: Any, headers: dict[str, str]) -> McpAnswer:
    """A ``CallToolResult`` as tool_result text: its text blocks, else its structured content."""
    parts: list[str] = []
    for block in result.content:
        if getattr(block, "type", None) == "text":
            parts.append(block.text)
        else:
            parts.append(json.dumps({"type": getattr(block, "type", "unknown"), "mimeType": _mime(block)}))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, sort_keys=True))
    return McpAnswer(_scrub("\n".join(parts), headers), bool(result.is_error))


def _mime(block: Any) -> str | None:
    mime = getattr(block, "mime_type", None)
    return mime if isinstance(mime, str) else None


def _scrub(text: str, headers: dict[str, str]) -> str:
    """``text`` without any header value (or any long word of one, a bare token a server echoed)."""
    secrets = {v for v in headers.values() if v} | {
        word for v in headers.values() for word in v.split() if len(word) >= 8
    }
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return text


def _run(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from synchronous code (on a thread of its own inside a loop).

    The SDK is imported first, so its import time (seconds on a cold start) counts against no deadline.
    """
    import asyncio

    import mcp.client.streamable_http  # noqa: F401

    async def main() -> T:
        return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()
