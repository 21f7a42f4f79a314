"""``loopengine dev``: the api Lambda behind a real local HTTP server.

Each request becomes an API Gateway HTTP API (payload 2.0) event and goes through the very same
``handlers.api.handler`` a deployment runs; resumes run in-process on background threads. The store
is SQLite (``LOOPENGINE_DB``) unless ``LOOPENGINE_TABLE`` names a DynamoDB table. Parked turns live
in the store, so stopping and starting the server loses nothing. A background :class:`Sweeper`
runs the sweep (what the schedule Lambda does in AWS) every ``--sweep-interval`` seconds. The HTTP
side, and what it refuses before a handler runs, is :mod:`loopengine.local.dev_http` / ``dev_guard``.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import threading

from loopengine.channels.inbox.csrf import SECRET_ENV as INBOX_SECRET_ENV
from loopengine.local import dev_guard as guard
from loopengine.local.dev_environments import DEFAULT_LIMIT as DEFAULT_LIMIT
from loopengine.local.dev_environments import DEFAULT_MAX_WAITS
from loopengine.local.dev_environments import Environments as Environments
from loopengine.local.dev_environments import start_method as start_method
from loopengine.local.dev_http import LISTEN_BACKLOG as LISTEN_BACKLOG
from loopengine.local.dev_http import MAX_BODY_BYTES as MAX_BODY_BYTES
from loopengine.local.dev_http import READ_TIMEOUT as READ_TIMEOUT
from loopengine.local.dev_http import Handler as Handler
from loopengine.local.dev_http import LocalContext as LocalContext
from loopengine.local.dev_http import make_server as make_server
from loopengine.local.dev_http import to_event as to_event


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


SCRIPTED_DELAY = "0.03"
"""Seconds between two words of the offline model's answer under ``loopengine dev``: about the pace of a
real model, so a reply of a sentence or two streams as a few ``text:delta`` events."""


def prepare_env(env: dict[str, str] | os._Environ[str]) -> list[str]:
    """Local defaults; returns notes.

    Anonymous access without admin auth, quiet observability, an offline model that streams its
    text a word every :data:`SCRIPTED_DELAY` seconds.
    """
    notes = []
    env.setdefault("LOOPENGINE_SCRIPTED_DELAY", SCRIPTED_DELAY)
    env.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    env.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    env.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    if not env.get("LOOPENGINE_ADMIN_AUTH"):
        env.setdefault("LOOPENGINE_ALLOW_ANONYMOUS", "1")
        notes.append("no LOOPENGINE_ADMIN_AUTH: routes accept anonymous callers (local only)")
    # the inbox signs its forms; one key for all environments of this run (a restart voids open pages)
    env.setdefault(INBOX_SECRET_ENV, secrets.token_hex(32))
    return notes


def _max_waits(env: os._Environ[str]) -> int:
    """``LOOPENGINE_MAX_WAITS`` as the handler reads it (malformed: the default; the handler refuses it)."""
    raw = (env.get("LOOPENGINE_MAX_WAITS") or "").strip()
    return int(raw) if raw.isdigit() and int(raw) >= 1 else DEFAULT_MAX_WAITS


def serve(
    port: int,
    workers: int = 4,
    sweep_interval: float = 10.0,
    host: str = "127.0.0.1",
    read_timeout: float = READ_TIMEOUT,
    max_environments: int = DEFAULT_LIMIT,
) -> int:
    """Run until interrupted; sweep every ``sweep_interval`` seconds (0: never).

    Listens on ``host`` and answers requests whose Host header is loopback or ``host``; a client
    has ``read_timeout`` seconds to send each whole request. ``workers`` environments start at
    once, more when every one is busy, up to ``max_environments`` (see :class:`Environments`).
    """
    from loopengine.domain.base.timings import timings

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
    environments = Environments(workers, max_environments, _max_waits(os.environ))
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
    print(f"  try: curl -s localhost:{port}/health", flush=True)
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
