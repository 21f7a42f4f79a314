"""``loopengine dev``'s execution environments: processes that run one event at a time, started as needed.

Like Lambda, concurrency comes from more environments, not from threads in one: Powertools'
resolver keeps the current event in shared state, so one process must never run two requests at
once. ``workers`` environments start with the server (provisioned concurrency); a request that finds
every one busy starts another, up to ``limit`` (reserved concurrency), and beyond that waits for one
to be free. Resumes run on background threads inside the environment that triggered them, and an
environment stays until the server stops (or it dies: the next request starts another).

A long-poll (a request with ``wait`` > 0) holds its environment for its wait, as on Lambda. Each
principal's waits are bounded by the handler (``LOOPENGINE_MAX_WAITS`` slots in the store: the next
one is 429 ``too_many_waits`` at once, with ``Retry-After``); the server refuses the same way, before
the request takes an environment, a long-poll beyond that many in flight with the same credentials
(so a burst of waits starts no environments only to refuse them). Waits together hold at most
``limit - workers`` environments: the rest serve ordinary requests, and one spare is kept warm while
there is room, so one principal's long-polls never queue another's request.

Environments are forked from one process that loaded what they share
(:mod:`loopengine.local.dev_warm`) where the platform can, else spawned; each builds its engine
(the cold start) when it starts, before its first event.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import random
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from loopengine.local.dev_http import LocalContext

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import BaseContext
    from multiprocessing.process import BaseProcess

    from aws_lambda_powertools.utilities.typing import LambdaContext

DEFAULT_LIMIT = 32
"""The most environments ``loopengine dev`` runs at once unless ``--max-environments`` says otherwise."""
DEFAULT_MAX_WAITS = 8
"""Long-polls one caller may hold at once unless ``LOOPENGINE_MAX_WAITS`` says otherwise (as the handler)."""


_FORKSERVER_SOCKET = "/pymp-xxxxxxxx/listener-xxxxxxxx"
"""What multiprocessing appends to the temporary directory for the forkserver's socket."""
_UNIX_PATH_MAX = 104
"""The bytes a unix socket's path may take, its terminating NUL included (macOS; Linux allows 108)."""


def start_method() -> str:
    """How environments start: forked from one warmed process where the platform can, else spawned.

    ``forkserver`` (Linux, macOS): a server process imports :mod:`loopengine.local.dev_warm` once
    and forks every environment from itself, so they start with the handler's modules and (when
    turns call Anthropic) the model SDK loaded. ``spawn`` (elsewhere, or where the forkserver's
    socket path would not fit: a long ``TMPDIR``): each imports them itself.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    socket_path = len(os.fsencode(tempfile.gettempdir())) + len(_FORKSERVER_SOCKET)
    return "forkserver" if socket_path < _UNIX_PATH_MAX else "spawn"


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent server handles Ctrl-C
    signal.signal(signal.SIGTERM, _stop_environment)
    random.seed()  # forked: not the state of the process it was forked from (ids use ``secrets``)
    from loopengine.http import api, root

    assert api.handler is not None
    root.engine()  # pay the cold start before the first request, like a provisioned environment


def _stop_environment(_signum: int, _frame: Any) -> None:
    """SIGTERM (the server stopping its environments): stop this one's stdio MCP servers, then die of it."""
    mcp_loop = sys.modules.get("loopengine.mcp.loop")  # loaded only where a stdio server was used
    if mcp_loop is not None:
        mcp_loop.close()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _invoke(event: dict[str, Any]) -> dict[str, Any]:
    from loopengine.http import api

    context = cast("LambdaContext", LocalContext())  # the attributes the handlers read, duck-typed
    result: dict[str, Any] = api.handler(event, context)
    return result


def _sweep() -> tuple[int, int, int]:
    """One sweep in this environment (its re-invoked resumes run on its background threads)."""
    from loopengine.http import root

    done = root.engine().sweep()
    return done.expired, done.recovered, done.notified


START_RETRIES = 2
"""A failed cold start (a busy machine, a locked file) is retired and tried again this many times in a
row before the requests waiting are told it failed; each failure is printed to the server log."""


def _main(conn: Connection) -> None:  # pragma: no cover - runs in the environment's process
    """An environment: start (the cold start), say so, then run each job the server sends, one at a time."""
    failed: str | None = None
    try:
        _ignore_interrupts()
    except Exception as exc:  # every job is answered with it: the server reports, never hangs
        failed = f"the environment did not start: {type(exc).__name__}: {exc}"
    try:
        conn.send(("ready", failed))
        while True:
            kind, payload = conn.recv()
            try:
                if failed is not None:
                    raise RuntimeError(failed)
                answer: tuple[str, Any] = ("ok", _invoke(payload) if kind == "event" else _sweep())
            except Exception as exc:
                answer = ("error", f"{type(exc).__name__}: {str(exc)[:500]}")
            conn.send(answer)
    except (EOFError, OSError):  # the server is gone
        return


@dataclass(eq=False)
class _Environment:
    process: BaseProcess
    conn: Connection


def wait_of(event: dict[str, Any]) -> float:
    """How long the request long-polls: its query's ``wait`` in seconds (0 when it does not wait)."""
    raw = (event.get("queryStringParameters") or {}).get("wait")
    try:
        seconds = float(raw) if raw is not None else 0.0
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) and seconds > 0 else 0.0


def caller_of(event: dict[str, Any]) -> str:
    """Who sends the request, as far as the server can tell without the handler: its credentials' hash."""
    headers = event.get("headers") or {}
    return hashlib.sha256(str(headers.get("authorization", "")).encode()).hexdigest()


def too_many_waits(max_waits: int, seconds: float) -> dict[str, Any]:
    """The handler's own 429 ``too_many_waits`` answer, as a Lambda proxy result."""
    body = {
        "error": "too_many_waits",
        "message": f"you already hold {max_waits} long-polls; retry when one ends",
    }
    headers = {
        "Content-Type": "application/json",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",
        "Retry-After": str(max(1, math.ceil(seconds))),
    }
    return {"statusCode": 429, "headers": headers, "body": json.dumps(body)}


class Environments:
    """Worker processes standing in for Lambda execution environments: one event each at a time.

    ``count`` start at once; more start when every one is busy (one more is kept warm while there
    is room), up to ``limit`` (at least ``count + 1``); long-polls hold at most ``limit - count``
    of them at once, and one caller's (same credentials) at most ``max_waits``: the next is
    refused here, with the handler's own 429, before it takes an environment.
    """

    def __init__(self, count: int, limit: int = DEFAULT_LIMIT, max_waits: int = DEFAULT_MAX_WAITS) -> None:
        self.count = count
        self.limit = max(limit, count + 1)
        self.max_waits = max_waits
        self._idle: list[_Environment] = []
        self._all: set[_Environment] = set()
        self._total = 0  # started or starting
        self._growing = 0  # starting
        self._start_failures = 0  # failed starts in a row (a transient one is retried)
        self._asking = 0  # requests waiting for an environment
        self._waits = 0  # environments held by long-polls
        self._callers: dict[str, int] = {}  # long-polls in flight per caller
        self._closed = False
        self._changed = threading.Condition()
        self._context: BaseContext | None = None
        self._failed: BaseException | None = None
        self._ready = threading.Event()
        # The forkserver loads dev_warm before the first fork (about half a second): the server
        # listens meanwhile, and a request that comes first waits for its environment.
        threading.Thread(target=self._start, name="environments", daemon=True).start()

    def _start(self) -> None:
        try:
            method = start_method()
            context = multiprocessing.get_context(method)
            if method == "forkserver":
                context.set_forkserver_preload(["loopengine.local.dev_warm"])
            self._context = context
            with self._changed:
                for _ in range(self.count):
                    self._grow()
        except BaseException as exc:  # handed to the requests, which report it
            self._failed = exc
        finally:
            self._ready.set()

    def _grow(self) -> None:
        """Start one more environment in the background (called holding ``_changed``)."""
        self._total += 1
        self._growing += 1
        threading.Thread(target=self._started, name="environment-start", daemon=True).start()

    def _started(self) -> None:
        """Start an environment; once it is warm (its cold start done) it is free for requests."""
        env: _Environment | None = None
        try:
            context = self._context
            assert context is not None
            mine, theirs = context.Pipe()
            process = context.Process(target=_main, args=(theirs,), name="environment", daemon=True)  # type: ignore[attr-defined]
            process.start()
            theirs.close()
            env = _Environment(process, mine)
            with self._changed:
                self._all.add(env)
            _ready, failed = env.conn.recv()  # ("ready", None) or ("ready", why its cold start failed)
            if failed is not None:
                raise RuntimeError(failed)
        except Exception as exc:  # retired and started again (twice); then the waiting requests are told
            sys.stderr.write(f"  an environment did not start: {exc}\n")
            with self._changed:
                self._growing -= 1
                self._start_failures += 1
                retry = self._start_failures <= START_RETRIES and not self._closed
                if not retry:
                    self._failed = exc
            self._lost(env, waited=False)
            if retry:
                with self._changed:
                    self._grow()
            return
        with self._changed:
            self._growing -= 1
            self._failed = None
            self._start_failures = 0
            self._idle.append(env)
            self._changed.notify_all()

    def _checkout(self, wait: bool) -> _Environment:
        """The first environment free (starting more while none is, up to the limit)."""
        self._ready.wait()
        if self._context is None:
            raise RuntimeError(f"the environments did not start: {self._failed!r}") from self._failed
        with self._changed:
            self._asking += 1
            try:
                while True:
                    if self._closed:
                        raise RuntimeError("the environments are stopped")
                    if self._failed is not None and not self._idle and not self._growing:
                        raise RuntimeError(f"no environment could start: {self._failed!r}")
                    allowed = not wait or self._waits < self.limit - self.count
                    if allowed and self._idle:
                        env = self._idle.pop()
                        break
                    if allowed and self._growing < self._asking and self._total < self.limit:
                        self._grow()
                    self._changed.wait()
            finally:
                self._asking -= 1
            self._waits += wait
            if not self._idle and not self._growing and self._total < self.limit:
                self._grow()  # keep one warm for the next request
            return env

    def _checkin(self, env: _Environment, waited: bool) -> None:
        with self._changed:
            self._waits -= waited
            self._idle.append(env)
            self._changed.notify_all()

    def _lost(self, env: _Environment | None, waited: bool) -> None:
        """An environment that died (or never started): forget it; the next request starts another."""
        if env is not None:
            env.process.kill()
            env.process.join(5)
            env.conn.close()
        with self._changed:
            if env is not None:
                self._all.discard(env)
            self._total -= 1
            self._waits -= waited
            self._changed.notify_all()

    def _run(self, kind: str, payload: Any, wait: bool = False, timeout: float | None = None) -> Any:
        env = self._checkout(wait)
        try:
            env.conn.send((kind, payload))
            if timeout is not None and not env.conn.poll(timeout):
                threading.Thread(target=self._late, args=(env, wait), daemon=True).start()
                raise TimeoutError(f"no answer within {timeout:g} s")
            status, answer = env.conn.recv()
        except (EOFError, OSError) as exc:
            self._lost(env, wait)
            raise RuntimeError("the environment stopped while it ran the request") from exc
        self._checkin(env, wait)
        if status != "ok":
            raise RuntimeError(answer)
        return answer

    def _late(self, env: _Environment, waited: bool) -> None:
        """Take a late answer off the environment, then free it (or forget it if it died)."""
        try:
            env.conn.recv()
        except (EOFError, OSError):
            self._lost(env, waited)
            return
        self._checkin(env, waited)

    def __call__(self, event: dict[str, Any], _context: Any) -> dict[str, Any]:
        """Run one event in a free environment; a caller's long-poll beyond ``max_waits`` is 429 here."""
        seconds = wait_of(event)
        if not seconds:
            result: dict[str, Any] = self._run("event", event)
            return result
        caller = caller_of(event)
        with self._changed:
            if self._callers.get(caller, 0) >= self.max_waits:
                return too_many_waits(self.max_waits, seconds)
            self._callers[caller] = self._callers.get(caller, 0) + 1
        try:
            result = self._run("event", event, wait=True)
            return result
        finally:
            with self._changed:
                self._callers[caller] -= 1
                if not self._callers[caller]:
                    del self._callers[caller]

    def sweep(self, timeout: float) -> tuple[int, int, int]:
        """Run one sweep in a free environment: (expired, recovered, notified)."""
        expired, recovered, notified = self._run("sweep", None, timeout=timeout)
        return int(expired), int(recovered), int(notified)

    @property
    def started(self) -> int:
        """Environments running now (started or starting)."""
        with self._changed:
            return self._total

    def close(self) -> None:
        """Stop every environment (background resumes in flight stop with them)."""
        self._ready.wait()
        with self._changed:
            self._closed = True
            envs = list(self._all)
            self._changed.notify_all()
        for env in envs:
            env.process.terminate()
        for env in envs:
            env.process.join(5)
            if env.process.is_alive():
                env.process.kill()
                env.process.join(5)
            env.conn.close()
