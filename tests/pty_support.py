"""Drive a command through a real pseudo-terminal (what a person at a terminal does), stdlib only.

``Terminal(argv, env)`` forks the command onto a new pty (its controlling terminal, so Ctrl-C
written to it becomes SIGINT by the terminal's own line discipline), :meth:`Terminal.expect` reads
until a pattern appears, :meth:`Terminal.line` types a line, :meth:`Terminal.ctrl_c` presses Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import time


class Terminal:
    """One command running on a pty; everything it printed is kept in :attr:`output`."""

    def __init__(self, argv: list[str], env: dict[str, str], *, sigint_ignored: bool = False) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal
            try:
                # Ctrl-C interrupts it as in a terminal, even if the test run has SIGINT ignored
                # (unless the test asks for it ignored, as a script's background job has it)
                signal.signal(signal.SIGINT, signal.SIG_IGN if sigint_ignored else signal.SIG_DFL)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.output = ""
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
        self.output += data.decode("utf-8", "replace").replace("\r\n", "\n")
        return True

    def expect(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """Wait for ``pattern`` (a regex) in the output after the last match; AssertionError if not."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = regex.search(self.output, self._seen)
            if found is not None:
                self._seen = found.end()
                return found
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(min(left, 0.2)):
                found = regex.search(self.output, self._seen)
                if found is not None:
                    self._seen = found.end()
                    return found
                how = "in time" if left <= 0 else f"before the terminal closed ({self._exit_status()})"
                raise AssertionError(f"{pattern!r} never appeared {how}; output:\n{self.output}")

    def _exit_status(self) -> str:
        """How the command ended, if it has (for a failure message)."""
        for _ in range(20):
            with contextlib.suppress(ChildProcessError):
                done, status = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    self.status = os.waitstatus_to_exitcode(status)
                    return f"exit status {self.status}"
            time.sleep(0.05)
        return "still running"

    def line(self, text: str) -> None:
        """Type ``text`` and Enter."""
        os.write(self.fd, text.encode() + b"\r")

    def ctrl_c(self) -> None:
        """Press Ctrl-C."""
        os.write(self.fd, b"\x03")

    def wait(self, timeout: float = 20.0) -> int:
        """The exit status, reading (and keeping) what is still printed; kill after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                while self._read(0.05) and select.select([self.fd], [], [], 0)[0]:
                    pass
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
            self._read(0.1)
        self.close()
        raise AssertionError(f"the command did not exit; output:\n{self.output}")

    def close(self) -> None:
        """Kill the command if it still runs; close the terminal."""
        if self.status is None:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            self.status = -9
        with contextlib.suppress(OSError):
            os.close(self.fd)
