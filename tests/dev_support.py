"""``loopengine dev`` as a subprocess (the way a user runs it) and a JSON client for it."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

AUTH = "Basic " + base64.b64encode(b"admin:secret").decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def request(
    port: int,
    method: str,
    path: str,
    body: Any = None,
    auth: str = AUTH,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    req.add_header("Authorization", auth)
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def admin_env(db: Path, **extra: str) -> dict[str, str]:
    """The environment of a local server on SQLite ``db`` with the scripted model and ``admin:secret``.

    Whatever in the test run's own environment would pick DynamoDB, add a default webhook or open
    the routes to anonymous callers is removed.
    """
    env = {
        **os.environ,
        "LOOPENGINE_DB": str(db),
        "LOOPENGINE_ADMIN_AUTH": "admin:secret",
        "LOOPENGINE_MODEL": "scripted",
        **extra,
    }
    for name in ("LOOPENGINE_TABLE", "LOOPENGINE_DEFAULT_WEBHOOK_URL", "LOOPENGINE_ALLOW_ANONYMOUS"):
        env.pop(name, None)
    return env


def _default_sigint() -> None:
    """In the child: Ctrl-C stops it even when the test run was started with SIGINT ignored.

    A background job (``cmd &`` in a script, nohup, some CI runners) inherits SIGINT ignored, and
    Python then never raises KeyboardInterrupt: :meth:`DevProcess.stop` would wait 10 s, then kill.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ignored_sigint() -> None:
    """In the child: SIGINT ignored, as a non-interactive shell's background job has it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


WORKERS = 2
"""Environments of a test's ``loopengine dev`` unless its args say ``--workers``: two still serve
requests side by side, and each environment is a process importing the engine (about half a second
of CPU each, on a machine the parallel tests share). Tests of concurrency ask for more."""


class DevProcess:
    """``loopengine dev --port N [args]`` with ``env``; output appended to ``log`` (discarded if None).

    ``streamed``: keep ``loopengine dev``'s own pace for the offline model's text (a word every 0.03 s);
    by default it answers at once (``LOOPENGINE_SCRIPTED_DELAY=0`` unless ``env`` says otherwise).

    The server runs in a process group of its own, so :meth:`kill` takes down its environments too.
    """

    def __init__(
        self,
        env: dict[str, str],
        port: int,
        log: Path | None = None,
        args: tuple[str, ...] = (),
        host: str = "127.0.0.1",
        *,
        sigint_ignored: bool = False,
        streamed: bool = False,
    ) -> None:
        workers = () if "--workers" in args else ("--workers", str(WORKERS))
        if not streamed:  # the offline model answers at once, as tests of other things want
            env = {"LOOPENGINE_SCRIPTED_DELAY": "0", **env}
        self.sigint_ignored = sigint_ignored
        """Start it with SIGINT ignored, as a script's ``loopengine dev &`` does (it must still stop)."""
        self.env, self.port, self.log, self.args, self.host = env, port, log, (*workers, *args), host
        self.proc: subprocess.Popen[bytes] | None = None

    def log_text(self) -> str:
        return self.log.read_text() if self.log is not None else ""

    def start(self) -> None:
        """Start the server and wait (up to 60 s: parallel tests load the machine) until /health answers.

        Tests run in parallel (pytest-xdist), so the port picked by :func:`free_port` (or the one a
        restart reuses) can be taken by another test in the meantime: when the server cannot listen
        (exit code 2) it starts again on a fresh port, and ``self.port`` follows.
        """
        for _attempt in range(3):
            if self._start_once():
                return
            self.port = free_port()
        raise RuntimeError(f"loopengine dev could not listen on a free port: {self.log_text()}")

    def _start_once(self) -> bool:
        command = [sys.executable, "-m", "loopengine.local.cli", "dev", "--port", str(self.port), *self.args]
        if self.host != "127.0.0.1":
            command += ["--host", self.host]
        with open(self.log or os.devnull, "ab") as out:
            self.proc = subprocess.Popen(
                command,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_ignored_sigint if self.sigint_ignored else _default_sigint,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if self.proc.returncode == 2:
                    self.proc = None
                    return False
                raise RuntimeError(f"loopengine dev exited: {self.log_text()}")
            try:
                with urllib.request.urlopen(f"http://{self.host}:{self.port}/health", timeout=1):
                    return True
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"loopengine dev did not come up: {self.log_text()}")

    def kill(self) -> None:
        """``kill -9`` the server and every environment of it (its whole process group)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        """Ctrl-C the server; kill it (and its environments) if it has not stopped within 10 s."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
            self.proc = None
