"""What scripts/walkthrough.py is made of: a transcript, a shell that runs and starts commands, a terminal.

:class:`Shell` runs each command line with bash in the walkthrough's folder and records it with its
output in a :class:`Transcript`; ``adopt`` evaluates a line that changes the shell (``export``,
``source``) and keeps the environment it leaves; ``start`` runs a server in the background (its own
process group, output to a log file) and waits for the line saying it listens; ``stop_all`` stops every
one of them with Ctrl-C (SIGINT to its group), then SIGKILL after 10 s. :class:`Terminal` runs a command
on a pseudo-terminal, as a person at a keyboard does, and keeps when each piece of output arrived.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import pty
import re
import select
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class StepFailed(Exception):
    """A step's result is not what it should be (the message says what and what came instead)."""


def expect(ok: bool, what: str) -> None:
    """Fail the step with ``what`` unless ``ok``."""
    if not ok:
        raise StepFailed(what)


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def trim(text: str, head: int = 16, tail: int = 6, width: int = 240) -> str:
    """``text`` with long lines cut and, past ``head + tail`` lines, the middle left out."""
    lines = [
        line if len(line) <= width else line[: width - 1] + "…" for line in text.rstrip("\n").splitlines()
    ]
    if len(lines) > head + tail + 1:
        lines = [*lines[:head], f"… ({len(lines) - head - tail} more lines)", *lines[-tail:]]
    return "\n".join(lines)


class Transcript:
    """The walkthrough as Markdown: sections, each with prose and console blocks; echoed to stdout."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.console: list[str] | None = None

    def _close(self) -> None:
        if self.console is not None:
            self.parts.append("```console\n" + "\n".join(self.console) + "\n```\n")
            self.console = None

    def section(self, title: str, intro: str = "") -> None:
        """Start a section."""
        self._close()
        self.parts.append(f"## {title}\n" + (f"\n{intro}\n" if intro else ""))
        print(f"\n== {title}", flush=True)

    def note(self, text: str) -> None:
        """A paragraph between console blocks."""
        self._close()
        self.parts.append(text + "\n")
        print(f"   ({text})", flush=True)

    def block(self, text: str) -> None:
        """Output that no command of this section printed (another terminal's), as it is."""
        self._close()
        self.parts.append("```text\n" + text.rstrip("\n") + "\n```\n")
        print(text.rstrip("\n"), flush=True)

    def command(self, line: str, output: str = "", keep_all: bool = False) -> None:
        """``$ line`` and what it printed (trimmed unless ``keep_all``)."""
        if self.console is None:
            self.console = []
        shown = output.rstrip("\n") if keep_all else trim(output)
        self.console.append(f"$ {line}" + (f"\n{shown}" if shown else ""))
        print(f"$ {line}" + (f"\n{shown}" if shown else ""), flush=True)

    def markdown(self, header: str) -> str:
        """The whole page."""
        self._close()
        return header.rstrip("\n") + "\n\n" + "\n".join(self.parts)


@dataclass
class Started:
    """A server running in the background."""

    line: str
    process: subprocess.Popen[bytes]
    log: Path
    job: int
    """Its job number in the shell (``%1`` is the first started)."""

    def output(self) -> str:
        """What it printed so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Shell:
    """Runs command lines as a user types them, in ``cwd`` with ``env``, recording each."""

    def __init__(self, cwd: Path, env: dict[str, str], transcript: Transcript) -> None:
        self.cwd, self.env, self.transcript = cwd, env, transcript
        self.started: list[Started] = []
        self.logs = cwd / ".walkthrough"
        self.logs.mkdir(exist_ok=True)

    def run(self, line: str, timeout: float = 120, ok: bool = True) -> str:
        """Run ``line`` to its end; what it printed (stdout and stderr as they interleave)."""
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        self.transcript.command(line, done.stdout)
        if ok:
            expect(done.returncode == 0, f"`{line}` exited {done.returncode}:\n{trim(done.stdout)}")
        return done.stdout

    def adopt(self, line: str) -> None:
        """Run ``line`` (an ``export``, a ``source``) and keep the environment it leaves."""
        done = subprocess.run(
            ["bash", "-c", f"{line}\nenv -0"], cwd=self.cwd, env=self.env, capture_output=True, timeout=60
        )
        expect(done.returncode == 0, f"`{line}` failed: {done.stderr.decode(errors='replace')}")
        pairs = (item.split(b"=", 1) for item in done.stdout.split(b"\0") if b"=" in item)
        self.env = {k.decode(): v.decode() for k, v in pairs if k not in (b"_", b"SHLVL", b"PWD", b"OLDPWD")}
        self.transcript.command(line)

    def start(self, line: str, ready: str, timeout: float = 60) -> tuple[Started, re.Match[str]]:
        """Run ``line &`` and wait for a line of its output matching ``ready``."""
        log = self.logs / f"{len(self.started)}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                ["bash", "-c", re.sub(r"^((?:\w+=\S+\s+)*)", r"\1exec ", line)],  # its pid is the server's
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: Ctrl-C reaches it and its children
                preexec_fn=_job_signals,
            )
        started = Started(line, process, log, len(self.started) + 1)
        self.started.append(started)
        deadline = time.monotonic() + timeout
        while (found := re.search(ready, started.output())) is None:
            expect(process.poll() is None, f"`{line}` exited {process.returncode}:\n{trim(started.output())}")
            expect(
                time.monotonic() < deadline, f"`{line}` never printed {ready!r}:\n{trim(started.output())}"
            )
            time.sleep(0.05)
        shown = started.output()
        self.transcript.command(line + " &", shown[: shown.find("\n", found.end() - 1) + 1 or None])
        return started, found

    def edit(self, path: str, change: Callable[[str], str]) -> None:
        """Change the file at ``path`` (relative to the folder) and record the change as a diff."""
        file = self.cwd / path
        before = file.read_text()
        after = change(before)
        file.write_text(after)
        diff = difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=1
        )
        self.transcript.command(f"$EDITOR {path}", "".join(diff), keep_all=True)

    def stop(self, started: Started) -> int:
        """Ctrl-C to ``started``'s process group; SIGKILL if it is still there 10 s later. Its status."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(started.process.pid, signal.SIGINT)
        try:
            return started.process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(started.process.pid, signal.SIGKILL)
            return started.process.wait(10)

    def stop_all(self) -> list[tuple[Started, int]]:
        """Stop every server still running, the last started first; each with its exit status."""
        stopped = []
        while self.started:
            started = self.started.pop()
            stopped.append((started, self.stop(started)))
        return stopped


def _job_signals() -> None:
    """In a job's child: SIGINT as an interactive shell's job has it, even when ignored in this script.

    A script started in the background (``cmd &`` in a non-interactive shell, nohup, some CI
    runners) inherits SIGINT ignored, its children too, and a shell started with it ignored cannot
    reset it: Ctrl-C (``kill -INT %1``) would then stop nothing.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def replace_once(text: str, old: str, new: str) -> str:
    """``text`` with its one ``old`` replaced by ``new`` (the scaffold changed if it is not there once)."""
    expect(text.count(old) == 1, f"expected {old!r} once in the scaffolded file; the scaffold changed")
    return text.replace(old, new)


class Terminal:
    """A command on a pseudo-terminal; :attr:`chunks` holds each piece of output and when it came."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal
            try:
                _job_signals()  # Ctrl-C on the terminal interrupts it, as in a terminal
                os.chdir(cwd)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.output = ""
        self.chunks: list[tuple[float, int, int]] = []
        """(when, start, end) of each piece read, as offsets into :attr:`output`."""
        self._seen = 0
        self.status: int | None = None

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # the child closed the terminal
            return False
        if not data:
            return False
        start = len(self.output)
        self.output += data.decode("utf-8", "replace").replace("\r\n", "\n")
        self.chunks.append((time.monotonic(), start, len(self.output)))
        return True

    def expect(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """Wait for ``pattern`` after the last match."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while (found := regex.search(self.output, self._seen)) is None:
            left = deadline - time.monotonic()
            expect(left > 0, f"the chat never printed {pattern!r}; it printed:\n{trim(self.output, 40)}")
            if not self._read(min(left, 0.2)):
                expect(
                    bool(regex.search(self.output, self._seen)), f"the chat ended:\n{trim(self.output, 40)}"
                )
        self._seen = found.end()
        return found

    def type(self, text: str) -> None:
        """Type ``text`` and Enter."""
        os.write(self.fd, text.encode() + b"\r")

    def ctrl_d(self) -> None:
        """Press Ctrl-D (end of input)."""
        os.write(self.fd, b"\x04")

    def pieces(self, start: int, end: int) -> tuple[int, float]:
        """How many reads brought the output between ``start`` and ``end``, and over how many seconds."""
        times = [t for t, a, b in self.chunks if a < end and b > start]
        return len(times), (times[-1] - times[0]) if times else 0.0

    def wait(self, timeout: float = 20.0) -> int | None:
        """The exit status (None: still running after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                while self._read(0.05) and select.select([self.fd], [], [], 0)[0]:
                    pass
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
            self._read(0.1)
        return None

    def close(self) -> None:
        """Kill the command if it is still running; close the terminal."""
        if self.status is None:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            os.close(self.fd)
