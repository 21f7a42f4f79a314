"""``loopengine dev``: the api Lambda behind a real local HTTP server.

Each request becomes an API Gateway HTTP API (payload 2.0) event and goes through the very same
``handlers.api.handler`` a deployment runs; resumes run in-process on background threads. The store
is SQLite (``LOOPENGINE_DB``) unless ``LOOPENGINE_TABLE`` names a DynamoDB table. Parked turns live
in the store, so stopping and starting the server loses nothing. A background :class:`Sweeper`
runs the sweep (what the schedule Lambda does in AWS) every ``--sweep-interval`` seconds. The HTTP
side, and what it refuses before a handler runs, is :mod:`loopengine.local.dev_http` / ``dev_guard``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import secrets
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, cast

from loopengine.channels.inbox.csrf import SECRET_ENV as INBOX_SECRET_ENV
from loopengine.local import dev_guard as guard
from loopengine.local.dev_http import LISTEN_BACKLOG as LISTEN_BACKLOG
from loopengine.local.dev_http import MAX_BODY_BYTES as MAX_BODY_BYTES
from loopengine.local.dev_http import READ_TIMEOUT as READ_TIMEOUT
from loopengine.local.dev_http import Handler as Handler
from loopengine.local.dev_http import LocalContext as LocalContext
from loopengine.local.dev_http import make_server as make_server
from loopengine.local.dev_http import to_event as to_event

if TYPE_CHECKING:
    from multiprocessing.pool import Pool

    from aws_lambda_powertools.utilities.typing import LambdaContext


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


def start_method() -> str:
    """How environments start: forked from one warmed process where the platform can, else spawned.

    ``forkserver`` (Linux, macOS): a server process imports :mod:`loopengine.local.dev_warm` once
    and forks every environment from itself, so they start with the handler's modules and (when
    turns call Anthropic) the model SDK loaded. ``spawn`` (elsewhere): each imports them itself.
    """
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


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


class Environments:
    """Worker processes standing in for Lambda execution environments: one event each at a time.

    Like Lambda, concurrency comes from more environments, not from threads in one: Powertools'
    resolver keeps the current event in shared state, so one process must never run two requests
    at once. Resumes run on background threads inside the environment that triggered them.
    """

    def __init__(self, count: int) -> None:
        self._count = count
        self._pool: Pool | None = None
        self._failed: BaseException | None = None
        self._ready = threading.Event()
        # The forkserver loads dev_warm before the first fork (about half a second): the server
        # listens meanwhile, and a request that comes first waits for its environment.
        self._starting = threading.Thread(target=self._start, name="environments", daemon=True)
        self._starting.start()

    def _start(self) -> None:
        try:
            method = start_method()
            context = multiprocessing.get_context(method)
            if method == "forkserver":
                context.set_forkserver_preload(["loopengine.local.dev_warm"])
            self._pool = context.Pool(self._count, initializer=_ignore_interrupts)
        except BaseException as exc:  # handed to the requests, which report it
            self._failed = exc
        finally:
            self._ready.set()

    @property
    def pool(self) -> Pool:
        """The environments, once started (raises what stopped them from starting)."""
        self._ready.wait()
        if self._pool is None:
            raise RuntimeError(f"the environments did not start: {self._failed!r}") from self._failed
        return self._pool

    def __call__(self, event: dict[str, Any], _context: Any) -> dict[str, Any]:
        """Run one event in a free environment (waits for one when all are busy)."""
        result: dict[str, Any] = self.pool.apply(_invoke, (event,))
        return result

    def sweep(self, timeout: float) -> tuple[int, int, int]:
        """Run one sweep in a free environment: (expired, recovered, notified)."""
        result: tuple[int, int, int] = self.pool.apply_async(_sweep).get(timeout)
        return result

    def close(self) -> None:
        """Stop every environment (background resumes in flight stop with them)."""
        self._ready.wait()
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()


class Sweeper:
    """A parent thread that has an environment run the sweep every ``interval`` seconds.

    The first sweep runs at once (a restart picks up what the last run left behind); one runs at
    a time. A line is printed when a sweep did something, or failed; counts only.
    """

    def __init__(self, environments: Environments, interval: float) -> None:
        self.environments = environments
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sweeper", daemon=True)

    def start(self) -> None:
        """Start sweeping in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop after the sweep in progress, if any."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                expired, recovered, notified = self.environments.sweep(max(60.0, self.interval))
            except Exception as exc:  # the next sweep tries again
                if not self._stop.is_set():
                    print(f"  sweep failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            else:
                if expired or recovered or notified:
                    print(
                        f"  sweep: {expired} expired, {recovered} recovered, {notified} notified",
                        flush=True,
                    )
            self._stop.wait(self.interval)


def prepare_env(env: dict[str, str] | os._Environ[str]) -> list[str]:
    """Local defaults (anonymous access without admin auth, quiet observability); returns notes."""
    notes = []
    env.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    env.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    env.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    if not env.get("LOOPENGINE_ADMIN_AUTH"):
        env.setdefault("LOOPENGINE_ALLOW_ANONYMOUS", "1")
        notes.append("no LOOPENGINE_ADMIN_AUTH: routes accept anonymous callers (local only)")
    # the inbox signs its forms; one key for all environments of this run (a restart voids open pages)
    env.setdefault(INBOX_SECRET_ENV, secrets.token_hex(32))
    return notes


def serve(
    port: int,
    workers: int = 4,
    sweep_interval: float = 10.0,
    host: str = "127.0.0.1",
    read_timeout: float = READ_TIMEOUT,
) -> int:
    """Run until interrupted; sweep every ``sweep_interval`` seconds (0: never).

    Listens on ``host`` and answers requests whose Host header is loopback or ``host``; a client
    has ``read_timeout`` seconds to send each whole request.
    """
    from loopengine.domain.timings import timings

    timings(os.environ)  # a malformed setting fails here, once, not in every environment
    # Ctrl-C (or `kill -INT`) stops it even when it was started with SIGINT ignored, as a script's
    # `loopengine dev &` is: Python then never installs its handler, and the server would not stop.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    notes = prepare_env(os.environ)
    store = (
        f"DynamoDB table {os.environ['LOOPENGINE_TABLE']}"
        if os.environ.get("LOOPENGINE_TABLE")
        else (f"SQLite {os.environ.get('LOOPENGINE_DB') or '.loopengine/loopengine.db'}")
    )
    environments = Environments(workers)
    try:
        server = make_server(port, environments, host=host, read_timeout=read_timeout)
    except OSError as exc:
        environments.close()
        print(f"loopengine dev: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    sweeping = f"sweep every {sweep_interval:g}s" if sweep_interval > 0 else "no sweep"
    shown = f"[{host}]" if ":" in host else host
    print(f"loopengine dev: http://{shown}:{port}  (store: {store}, {workers} environments, {sweeping})")
    if host not in guard.LOOPBACK_HOSTS:
        names = ", ".join(sorted(guard.allowed_hosts(host) - guard.LOOPBACK_HOSTS))
        notes.append(
            f"listening beyond loopback: Host {names} is answered too; anyone who can reach it can call"
        )
    for note in notes:
        print(f"  note: {note}")
    print(json.dumps({"try": f"curl -s localhost:{port}/health"}), flush=True)
    sweeper = Sweeper(environments, sweep_interval) if sweep_interval > 0 else None
    if sweeper is not None:
        sweeper.start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        if sweeper is not None:
            sweeper.stop()
        server.server_close()
        environments.close()
    return 0
