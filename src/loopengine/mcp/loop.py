"""The one event loop of this process's long-lived MCP sessions (stdio servers), on a thread of its own.

The ``mcp`` SDK is async, and a stdio server's session outlives the call that started it: its
context (the child process, its pipes, the session's tasks) must be entered and left by one task of
one loop that keeps running between calls. :func:`submit` runs a coroutine on that loop from
synchronous code (a tool call on one of the engine's threads) and waits for its result.

- The loop and its thread start on first use, in the process that uses them. A process forked from
  one that had a loop (``loopengine dev``'s environments come from a warmed parent) starts a loop of
  its own and never touches what it inherited: the children and pipes are the parent's.
- :func:`shared` keeps this process's objects of that loop (the running servers), made anew after a
  fork like the loop.
- At exit (:mod:`atexit`; in a multiprocessing worker, which leaves past atexit, its finalisers; or
  :func:`close` called by a signal handler) the closers registered with
  :func:`on_close` run on the loop, within :data:`CLOSE_SECONDS`, so no child outlives the process;
  later :func:`submit` calls raise :class:`Closed`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")

CLOSE_SECONDS = 6.0
"""How long closing waits for the closers: the SDK closes a server's stdin, waits 2 s, sends SIGTERM,
waits 2 s more, then SIGKILL."""


class Closed(RuntimeError):
    """The MCP loop of this process has closed (the interpreter is exiting): nothing more is sent."""


class _State:
    """The loop of the process that made it (``pid``), and what to do when it closes."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.closers: list[Callable[[], Awaitable[None]]] = []
        self.shared: dict[str, object] = {}
        self.closed = False
        self.closing: Future[None] | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, name="loopengine-mcp", daemon=True)
        self.thread.start()


_lock = threading.RLock()
_state: _State | None = None


def _current() -> _State:
    global _state
    with _lock:
        if _state is None or _state.pid != os.getpid():  # none yet, or the parent's (forked)
            _state = _State()
            atexit.register(close)
            mp = sys.modules.get("multiprocessing.util")
            if mp is not None:  # a multiprocessing worker leaves by os._exit, past atexit
                mp.Finalize(None, close, exitpriority=0)
        if _state.closed:
            raise Closed("this process is exiting: its MCP servers are closed")
        return _state


def submit(make: Callable[[], Awaitable[T]]) -> T:
    """Run ``make()`` on the loop and wait for its result (its own deadlines bound the wait)."""
    state = _current()
    if threading.current_thread() is state.thread:
        raise RuntimeError("submit() was called from the MCP loop itself")

    async def run() -> T:
        return await make()

    return asyncio.run_coroutine_threadsafe(run(), state.loop).result()


def shared(name: str, make: Callable[[], T]) -> T:
    """The one ``name`` of this process (``make()`` on first use; a forked process makes its own)."""
    state = _current()
    with _lock:
        if name not in state.shared:
            state.shared[name] = make()
        return state.shared[name]  # type: ignore[return-value]


def on_close(closer: Callable[[], Awaitable[None]]) -> None:
    """Have ``closer()`` awaited on the loop when the process exits."""
    _current().closers.append(closer)


def close(timeout: float = CLOSE_SECONDS) -> None:
    """Run the closers (at most ``timeout`` seconds), then stop the loop; no-op in a forked process.

    Every call waits for the one closing: a SIGTERM handler that interrupts the exit's own close
    (even before it handed the closers to the loop) must not let the process die before its
    children are stopped.
    """
    with _lock:
        state = _state
        if state is None or state.pid != os.getpid():
            return
        state.closed = True
        if state.closing is None:
            state.closing = asyncio.run_coroutine_threadsafe(_closing(state.closers), state.loop)
        closing = state.closing
    with contextlib.suppress(Exception):  # exiting: what did not close in time dies with the process
        closing.result(timeout)
    state.loop.call_soon_threadsafe(state.loop.stop)


async def _closing(closers: list[Callable[[], Awaitable[None]]]) -> None:
    await asyncio.gather(*(closer() for closer in closers), return_exceptions=True)
