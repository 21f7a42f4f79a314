"""Time as a port: core code asks a Clock, never the system directly."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Source of the current time in Unix seconds."""

    def now(self) -> float:
        """Return the current time in seconds since the epoch."""
        ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> float:
        """Return ``time.time()``."""
        return time.time()


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        """Return the current fake time."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self._now += seconds
