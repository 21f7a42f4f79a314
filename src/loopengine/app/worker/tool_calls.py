"""Run one tool's code within its timeout, sync or async, and say how it ended.

:func:`run_tool` is the execute step of :func:`loopengine.app.worker.batch.run_call` (claim -> execute ->
record). The code runs on a thread of its own while the calling thread waits, so a call that hangs
cannot hold the worker past the call's timeout:

    sync tool   fn(args[, ctx]) on the thread; past ``timeout`` (plus a second's grace) the wait
                ends and the call is reported TIMED_OUT: the thread cannot be killed, so the
                tool may still finish and have its effect; its late result is discarded
    async tool  the awaitable it returns runs on a fresh event loop on that thread; past
                ``timeout`` its task is cancelled (CancelledError inside the tool)

While it waits, the calling thread looks at the turn once a second: when the turn's stop is
requested it sets ``ctx.cancel_event`` (a sync tool sees ``ctx.cancelled`` / ``ctx.check()``) and
cancels an async tool's task; a tool still running ``CANCEL_GRACE`` seconds after the stop is
left behind and reported STOPPED. Both TIMED_OUT and STOPPED become ``unknown`` outcomes: nobody
can vouch for what such a call did.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from loopengine.authoring.context import ToolContext
from loopengine.authoring.tools import Tool
from loopengine.domain.base.jsontypes import JsonDict

GRACE = 1.0
"""Seconds past a timeout the wait goes on (an async tool's cancellation runs in them)."""
CANCEL_GRACE = 2.0
"""Seconds a tool may go on after the turn's stop before the worker stops waiting for it."""
STOP_POLL = 1.0
"""How often (seconds) the waiting thread reads the turn for a stop request."""
_ASYNC_TICK = 0.05


class Ending(StrEnum):
    """How a tool's code ended."""

    RETURNED = "returned"
    RAISED = "raised"
    TIMED_OUT = "timed_out"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Ran:
    """What running the code came to: its value, its exception, or that nobody knows."""

    ending: Ending
    value: Any = None
    error: BaseException | None = None


class _TimedOut(Exception):
    pass


class _Stopped(Exception):
    pass


def run_tool(
    tool: Tool,
    args: JsonDict,
    ctx: ToolContext,
    stop_requested: Callable[[], bool],
    poll: float = STOP_POLL,
) -> Ran:
    """Run ``tool`` on ``args`` with ``ctx`` within ``ctx.timeout`` real seconds; see the module docstring."""
    box: list[Ran] = []
    done = threading.Event()
    started = time.monotonic()

    def target() -> None:
        try:
            box.append(Ran(Ending.RETURNED, value=_settle(tool.invoke(args, ctx), ctx, started)))
        except _TimedOut:
            box.append(Ran(Ending.TIMED_OUT))
        except _Stopped:
            box.append(Ran(Ending.STOPPED))
        except BaseException as exc:  # the tool's own failure (or cancellation) is a result; SystemExit,
            box.append(Ran(Ending.RAISED, error=exc))  # KeyboardInterrupt: raised again in the worker
        finally:
            done.set()

    threading.Thread(target=target, name=f"tool-{tool.name}-{ctx.call_id}", daemon=True).start()
    ran = _wait(done, box, ctx, started, stop_requested, poll)
    if ran.error is not None and not isinstance(ran.error, Exception) and not _cancelled(ran.error):
        raise ran.error  # what would end the process on the worker's own thread ends it here too
    return ran


def _wait(
    done: threading.Event,
    box: list[Ran],
    ctx: ToolContext,
    started: float,
    stop_requested: Callable[[], bool],
    poll: float,
) -> Ran:
    end = started + ctx.timeout + GRACE
    next_look = started + poll
    stopped_at: float | None = None
    while True:
        wake = min(end, next_look if stopped_at is None else stopped_at + CANCEL_GRACE)
        if done.wait(max(0.0, wake - time.monotonic())):
            return box[0]
        now = time.monotonic()
        if now >= end:
            return Ran(Ending.TIMED_OUT)
        if stopped_at is not None:
            if now >= stopped_at + CANCEL_GRACE:
                return Ran(Ending.STOPPED)
        elif now >= next_look:
            next_look = now + poll
            if _asks_to_stop(stop_requested):
                ctx.cancel_event.set()
                stopped_at = now


def _asks_to_stop(stop_requested: Callable[[], bool]) -> bool:
    try:
        return stop_requested()
    except Exception:  # a failed read is not a stop; the next look tries again
        return False


def _cancelled(error: BaseException) -> bool:
    """An asyncio cancellation (asyncio is imported only once an async tool runs: cold starts skip it)."""
    loaded = sys.modules.get("asyncio")
    return loaded is not None and isinstance(error, loaded.CancelledError)


def _settle(value: Any, ctx: ToolContext, started: float) -> Any:
    """The value itself, or (async code) what the awaitable comes to on a loop of its own."""
    if not inspect.isawaitable(value):
        return value
    import asyncio  # only here: a sync tool's path (and every handler's cold import) does without it

    return asyncio.run(_bounded(value, ctx, started))


async def _bounded(awaitable: Any, ctx: ToolContext, started: float) -> Any:
    """Await within the timeout; a stop or the timeout cancels the task (its own answer then stands)."""
    import asyncio

    task = asyncio.ensure_future(awaitable)
    end = started + ctx.timeout
    while True:
        finished, _ = await asyncio.wait({task}, timeout=_ASYNC_TICK)
        if finished:
            return task.result()
        timed_out = time.monotonic() >= end
        if timed_out or ctx.cancelled:
            task.cancel()
            try:
                return await task  # a tool that catches the cancellation and answers is believed
            except asyncio.CancelledError:
                raise (_TimedOut() if timed_out else _Stopped()) from None
