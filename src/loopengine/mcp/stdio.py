"""The MCP client over stdio: a server started as a child process, kept for the life of the process.

:class:`StdioMcpConnector` lists and calls the tools of agent.yaml's ``command:`` servers with the
``mcp`` SDK's stdio transport, on this process's MCP loop (:mod:`loopengine.mcp.loop`):

    one process per server         started by the first listing or call that needs it, in the
                                   process that needs it (never in a parent before a fork), reused
                                   by every later turn and call, closed when the process exits
    a server that died or hung     found by the listing that precedes every call (the pin's check):
                                   that session is dropped, the server started again and listed
                                   again, once, within the operation's deadline
    a call in flight when the      ToolOutcomeUnknown (the request was sent): never re-sent; the
    server dies or times out       session is dropped, so the next call starts the server again
    everything else                as over HTTP (:mod:`loopengine.mcp.client`): not run before
                                   ``tools/call`` is sent or when the server refuses it, an answer

The command's first word ``python`` is the interpreter that runs loopengine, with its import path
(``PYTHONPATH``): ``[python, -m, mcp_server_time]`` runs a package installed beside loopengine (a
Lambda function's own). Any other bare name is looked up on ``PATH``, then among this interpreter's
scripts (a virtualenv's console scripts, unactivated). The child's environment is the SDK's few
inherited variables (``PATH``, ``HOME``, ...) plus ``env`` and ``env_from`` only; ``env_from``
values are scrubbed from every text this module produces, as header values are over HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import sysconfig
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

from loopengine.authoring.mcp import ListedTool, McpAnswer, McpNotRun, McpPin, McpServer
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.mcp import loop
from loopengine.mcp.client import BaseConnector, _answer, _check_pin, _failure, _leaves, _listing, _why

T = TypeVar("T")
log = logging.getLogger("loopengine.mcp")

PYTHON = "python"
"""The first word of a command that means "the Python running loopengine"."""
CONNECTION_CLOSED = -32000
"""The SDK's error code for a session whose transport closed (``mcp_types.CONNECTION_CLOSED``)."""


@dataclass(frozen=True, slots=True)
class Launch:
    """How one server is started: the program and its arguments, and the child's added environment."""

    server: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = field(repr=False)


def launch(server: McpServer, secrets: Mapping[str, str]) -> Launch:
    """How ``server`` starts here: its first word resolved, ``env`` and ``env_from`` values added."""
    word, *args = server.command
    env = {**dict(server.env), **secrets}
    if word == PYTHON:
        program = sys.executable
        env.setdefault("PYTHONPATH", os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)))
    else:
        program = _which(word, env.get("PATH") or os.environ.get("PATH") or os.defpath)
    return Launch(server.name, (program, *args), tuple(sorted(env.items())))


def _which(word: str, path: str) -> str:
    if os.sep in word:
        return word
    for folders in (path, sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        found = shutil.which(word, path=folders)
        if found:
            return found
    return word  # starting it fails with the OS's own error, which names it


class StdioMcpConnector(BaseConnector):
    """List and call MCP tools of servers started over stdio; ``env`` holds the ``env_from`` variables.

    ``connect_timeout`` / ``timeout`` override every server's own, as for HTTP. A server's
    ``connect_timeout`` bounds starting its process and the handshake; its ``timeout`` the whole
    operation, a start included.
    """

    def list_tools(self, server: McpServer) -> list[ListedTool]:
        """Every tool ``server`` lists now (starting it if needed); ``McpNotRun`` when it cannot."""
        secrets = self._secrets(server)
        return _submit(server, lambda: self._list(server, secrets))

    def call_tool(self, server: McpServer, pin: McpPin, args: JsonDict) -> McpAnswer:
        """Call the pinned tool once, if the server still lists it with the pinned hash."""
        secrets = self._call_secrets(server)
        return _submit(server, lambda: self._call(server, pin, args, secrets))

    def _secrets(self, server: McpServer) -> dict[str, str]:
        return server.secrets(self._env)

    async def _list(self, server: McpServer, secrets: dict[str, str]) -> list[ListedTool]:
        async def listing() -> list[ListedTool]:
            _, listed = await _servers().listing(launch(server, secrets), self._connect(server))
            return listed

        return await self._listed(server, secrets, listing)

    async def _call(
        self, server: McpServer, pin: McpPin, args: JsonDict, secrets: dict[str, str]
    ) -> McpAnswer:
        import anyio

        sent = False
        running: _Running | None = None
        try:
            with anyio.fail_after(self._total(server)):
                running, listed = await _servers().listing(launch(server, secrets), self._connect(server))
                _check_pin(server, pin, listed)
                sent = True
                result = await running.client.session.call_tool(pin.tool, args)
        except Exception as exc:
            if sent and running is not None and not _answered(exc):
                running.stop()  # dead, hung or garbled: the next operation starts it again
            raise _failure(exc, server, pin, sent, secrets) from None
        return _answer(result, secrets)


def _answered(exc: BaseException) -> bool:
    """Whether the server answered the request with a JSON-RPC error (its session still works)."""
    codes = [getattr(leaf, "code", None) for leaf in _leaves(exc)]
    return all(isinstance(code, int) and code != CONNECTION_CLOSED for code in codes)


def _submit(server: McpServer, make: Callable[[], Awaitable[T]]) -> T:
    try:
        return loop.submit(make)
    except loop.Closed:
        msg = f"the {server.name} MCP server is closed (this process is exiting): not run"
        raise McpNotRun(msg) from None


class _Running:
    """One server process and its session, held open by a task of its own until :meth:`stop`.

    The SDK's stdio context (the child, its pipes, the session's tasks) must be left by the task that
    entered it: that task waits for :meth:`stop`, then leaves it (the SDK closes the child's stdin,
    then terminates its process group if it lingers, and reaps it).
    """

    def __init__(self, spec: Launch) -> None:
        self.spec = spec
        self.client: Any = None
        self.task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done() and not self._stop.is_set()

    async def start(self, timeout: float) -> None:
        import anyio

        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(self._hold(ready), name=f"mcp-stdio-{self.spec.server}")
        try:
            with anyio.fail_after(timeout):
                self.client = await ready
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Leave the session (a start still under way is cancelled); the task ends on its own."""
        self._stop.set()
        if self.client is None and self.task is not None:
            self.task.cancel()

    async def _hold(self, ready: asyncio.Future[Any]) -> None:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        program, *args = self.spec.argv
        params = StdioServerParameters(command=program, args=args, env=dict(self.spec.env))
        try:
            async with Client(stdio_client(params, errlog=_errlog()), cache=None) as client:
                if not ready.done():
                    ready.set_result(client)
                await self._stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.warning("the %s MCP server's session ended: %s", self.spec.server, _why(exc))


def _errlog() -> TextIO:
    """Where a server's stderr goes: this process's own (Lambda's log, the terminal of ``dev``)."""
    if sys.__stderr__ is not None:
        try:
            sys.__stderr__.fileno()
            return sys.__stderr__
        except (OSError, ValueError):
            pass
    return open(os.devnull, "w")  # the child holds it for its life


class _Servers:
    """The running stdio servers of this process, one per way of starting one."""

    def __init__(self) -> None:
        self._running: dict[Launch, _Running] = {}
        self._locks: dict[Launch, asyncio.Lock] = {}
        self._all: set[_Running] = set()

    async def listing(self, spec: Launch, start_timeout: float) -> tuple[_Running, list[ListedTool]]:
        """The running server of ``spec`` (started if needed) and its tools as it lists them now."""
        running, fresh = await self._get(spec, start_timeout)
        try:
            return running, await self._list(spec, running)
        except Exception as exc:
            if fresh:
                raise
            log.warning("the %s MCP server stopped answering (%s): starting it again", spec.server, _why(exc))
        running, _ = await self._get(spec, start_timeout)
        return running, await self._list(spec, running)

    async def _list(self, spec: Launch, running: _Running) -> list[ListedTool]:
        try:
            return await _listing(running.client)
        except BaseException:
            running.stop()
            if self._running.get(spec) is running:
                del self._running[spec]
            raise

    async def _get(self, spec: Launch, start_timeout: float) -> tuple[_Running, bool]:
        async with self._locks.setdefault(spec, asyncio.Lock()):
            running = self._running.get(spec)
            if running is not None and running.alive:
                return running, False
            running = _Running(spec)
            self._all.add(running)  # until its task ends: closing at exit waits for it
            try:
                await running.start(start_timeout)
            finally:
                if running.task is not None:
                    running.task.add_done_callback(lambda _task: self._all.discard(running))
            self._running[spec] = running
            return running, True

    async def close(self) -> None:
        """Stop every server and wait for their processes to end."""
        tasks = [r.task for r in self._all if r.task is not None]
        for running in list(self._all):
            running.stop()
        self._running.clear()
        await asyncio.gather(*tasks, return_exceptions=True)


def _servers() -> _Servers:
    def make() -> _Servers:
        servers = _Servers()
        loop.on_close(servers.close)
        return servers

    return loop.shared("stdio-servers", make)


def stop_servers() -> None:
    """Stop every stdio server this process started and wait for them (the next use starts them again)."""
    loop.submit(_servers().close)
