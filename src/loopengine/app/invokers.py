"""ResumeInvoker adapters that need no cloud: run the resume in this process.

``InlineInvoker`` resumes before returning (deterministic: demo, tests). ``ThreadInvoker`` resumes
on a background thread, the local stand-in for Lambda's asynchronous invoke (``loopengine dev``).
``RecordingInvoker`` only records, for tests that deliver the invocation themselves.
"""

from __future__ import annotations

import collections
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
    """Call ``resume(turn_id)`` on background threads, at most ``max_running`` at once.

    The local stand-in for Lambda's asynchronous invoke (whose concurrency the template reserves):
    invokes queue up and ``max_running`` daemon workers take them in order, so a sweep that finds
    a thousand due turns never starts a thousand threads. Nothing is dropped, and a turn already
    waiting in the queue is not queued twice (its resume claims it once anyway). ``join()`` waits
    until everything invoked so far has run; ``close()`` does so too, then takes no more.
    """

    def __init__(self, resume: Callable[[str], object] | None = None, max_running: int = 8) -> None:
        if max_running < 1:
            raise ValueError("max_running must be at least 1")
        self.resume = resume
        self.max_running = max_running
        self._queue: collections.deque[str] = collections.deque()
        self._waiting: set[str] = set()
        self._workers = 0
        self._busy = 0
        self._closed = False
        self._changed = threading.Condition()

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        """Queue the resume and return at once (one code version here: ``version`` is not used)."""
        if self.resume is None:
            raise RuntimeError("ThreadInvoker has no resume callback bound")
        with self._changed:
            if self._closed:  # the turn stays due: the sweep carries it on (in a later process)
                log.info("resume of %s not started: the invoker is closed", turn_id)
                return
            if turn_id not in self._waiting:
                self._waiting.add(turn_id)
                self._queue.append(turn_id)
            if self._workers < self.max_running and self._workers - self._busy < len(self._queue):
                self._workers += 1
                threading.Thread(target=self._work, name="resume-worker", daemon=True).start()
            self._changed.notify_all()

    def _work(self) -> None:
        while True:
            with self._changed:
                if not self._queue:
                    self._workers -= 1
                    self._changed.notify_all()
                    return
                turn_id = self._queue.popleft()
                self._waiting.discard(turn_id)
                self._busy += 1
            try:
                resume = self.resume
                if resume is not None:
                    resume(turn_id)
            except Exception:  # a background resume must report, not vanish
                log.exception("background resume of %s failed", turn_id)
            finally:
                with self._changed:
                    self._busy -= 1
                    self._changed.notify_all()

    @property
    def running(self) -> int:
        """Resumes running right now."""
        with self._changed:
            return self._busy

    def join(self, timeout: float = 10.0) -> None:
        """Wait (up to ``timeout`` seconds) until everything invoked so far has run."""
        with self._changed:
            self._changed.wait_for(lambda: not self._queue and self._busy == 0, timeout)

    def close(self, timeout: float = 10.0) -> bool:
        """Wait up to ``timeout`` seconds for the work in flight, then take no more invokes.

        A resume the work in flight invokes meanwhile (a hand-off) is waited for too. Returns
        whether everything finished; a resume still running after ``timeout`` carries on on its
        daemon thread, and a turn it leaves half done is the sweep's, as after a crash. An invoke
        after ``close`` is dropped (logged): its turn stays due and the sweep finds it.
        """
        with self._changed:
            idle = self._changed.wait_for(lambda: not self._queue and self._busy == 0, timeout)
            self._closed = True
            self._queue.clear()
            self._waiting.clear()
            return idle


class RecordingInvoker:
    """Record invocations without running anything."""

    def __init__(self) -> None:
        self.invoked: list[str] = []
        self.versions: list[str | None] = []

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        """Remember the turn id (and the pinned version, in ``versions``)."""
        self.invoked.append(turn_id)
        self.versions.append(version)
