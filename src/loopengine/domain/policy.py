"""Waiting policies: how long a pending item may wait, and what a new message does to a wait.

``pending_ttl`` ("90s", "30m", "72h", "7d") and ``on_expiry`` (``unknown``, the default, or
``deny``) can be set per agent (agent.yaml) and per rule (rules.yaml, which wins).
``on_new_message`` (agent.yaml): ``supersede`` (default), ``reject`` or ``queue``.
``live_wait`` (agent.yaml, a duration): how long a message sent on the live channel waits for an
inline decision before the other channels are notified.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from loopengine.domain.base.errors import ConfigError

ON_EXPIRY = ("unknown", "deny")
ON_NEW_MESSAGE = ("supersede", "reject", "queue")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any, where: str) -> float:
    """Seconds in ``"72h"``-style text (or a plain number of seconds)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf:
        return float(value)
    match = _DURATION.match(value) if isinstance(value, str) else None
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(f"{where}: {value!r} is not a duration like 90s, 30m, 72h or 7d")
    return float(match.group(1)) * _UNIT[match.group(2)]


def describe(seconds: float) -> str:
    """``259200`` -> ``"72h"``: hours up to a week, then whole days; minutes and seconds below."""
    if seconds >= 7 * 86400 and seconds % 86400 == 0:
        return f"{int(seconds // 86400)}d"
    for unit in ("h", "m"):
        if seconds >= _UNIT[unit] and seconds % _UNIT[unit] == 0:
            return f"{int(seconds // _UNIT[unit])}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True, slots=True)
class Expiry:
    """How long an item may wait and what nobody answering means."""

    ttl_seconds: float
    on_expiry: str = "unknown"

    @staticmethod
    def parse(raw: dict[str, Any], where: str) -> Expiry | None:
        """Read ``pending_ttl`` / ``on_expiry`` from a mapping (None when no ttl is set)."""
        on_expiry = raw.get("on_expiry", "unknown")
        if on_expiry not in ON_EXPIRY:
            raise ConfigError(f"{where}.on_expiry: must be one of {list(ON_EXPIRY)}, not {on_expiry!r}")
        if raw.get("pending_ttl") is None:
            if "on_expiry" in raw:
                raise ConfigError(f"{where}: on_expiry needs a pending_ttl")
            return None
        return Expiry(parse_duration(raw["pending_ttl"], f"{where}.pending_ttl"), on_expiry)


def on_new_message(raw: dict[str, Any], where: str) -> str:
    """The agent's ``on_new_message`` policy."""
    value = raw.get("on_new_message", "supersede")
    if value not in ON_NEW_MESSAGE:
        raise ConfigError(f"{where}.on_new_message: must be one of {list(ON_NEW_MESSAGE)}, not {value!r}")
    return str(value)


@dataclass(frozen=True, slots=True)
class ModelRetry:
    """``model_retry:`` a transient model error waits ``first_wait`` doubling up to ``max_wait``.

    After ``attempts`` failures in a row the turn ends ``error``. The deployment's defaults (Runtime:
    5 attempts, 30 s first wait, 10 min at most) apply when an agent names none.
    """

    attempts: int = 5
    first_wait: float = 30.0
    max_wait: float = 600.0

    def wait(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure in a row."""
        return float(min(self.first_wait * 2.0 ** (failures - 1), self.max_wait))

    def to_dict(self) -> dict[str, Any]:
        """Snapshot form."""
        return {"attempts": self.attempts, "first_wait": self.first_wait, "max_wait": self.max_wait}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ModelRetry:
        """Parse the snapshot form."""
        return ModelRetry(int(d["attempts"]), float(d["first_wait"]), float(d["max_wait"]))
