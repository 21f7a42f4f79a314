"""ResumeInvoker adapters that need no cloud: run the resume in this process.

``InlineInvoker`` resumes before returning (deterministic: demo, tests). ``ThreadInvoker`` resumes
on a background thread, the local stand-in for Lambda's asynchronous invoke (``loopengine dev``).
``RecordingInvoker`` only records, for tests that deliver the invocation themselves.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class InlineInvoker:
    """Call ``resume(turn_id)`` synchronously."""

    def __init__(self, resume: Callable[[str], object] | None = None) -> None:
        self.resume = resume

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        """Resume now, in this thread (one code version here: ``version`` is not used)."""
        if self.resume is None:
            raise RuntimeError("InlineInvoker has no resume callback bound")
        self.resume(turn_id)


class ThreadInvoker:
    """Call ``resume(turn_id)`` on a daemon thread; ``join()`` waits for all of them."""

    def __init__(self, resume: Callable[[str], object] | None = None) -> None:
        self.resume = resume
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        """Start the resume in the background and return at once."""
        resume = self.resume
        if resume is None:
            raise RuntimeError("ThreadInvoker has no resume callback bound")

        def run() -> None:
            try:
                resume(turn_id)
            except Exception:  # a background resume must report, not vanish
                log.exception("background resume of %s failed", turn_id)

        thread = threading.Thread(target=run, name=f"resume-{turn_id}", daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def join(self, timeout: float = 10.0) -> None:
        """Wait for the resumes started so far."""
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(timeout)


class RecordingInvoker:
    """Record invocations without running anything."""

    def __init__(self) -> None:
        self.invoked: list[str] = []
        self.versions: list[str | None] = []

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        """Remember the turn id (and the pinned version, in ``versions``)."""
        self.invoked.append(turn_id)
        self.versions.append(version)
