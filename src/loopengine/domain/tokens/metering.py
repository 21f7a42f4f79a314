"""Usage summed over model calls: a turn's, a session's, a tenant's day (no I/O).

:class:`Metered` is a :class:`~loopengine.domain.tokens.usage.Usage` plus the number of model calls it
sums; its JSON is the API's four counts and ``modelCalls`` (``GET /turns/{turnId}``'s ``usage``).
A turn keeps two of them: what its calls used (``metered``) and how much of that its tenant's daily
counters hold already (``counted``); a pause or finish adds the difference (a :class:`Tally`) to the
counters of its tenant, agent and UTC day in the same write.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from loopengine.domain.tokens.usage import Usage

DAY_FORMAT = "%Y-%m-%d"
PACKED = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "model_calls",
)
"""The names of :meth:`Metered.packed`'s five counts, in order (the daily counters' columns)."""


@dataclass(frozen=True, slots=True)
class Metered:
    """Usage summed over ``model_calls`` model calls."""

    usage: Usage = field(default_factory=Usage)
    model_calls: int = 0

    def __bool__(self) -> bool:
        return self.model_calls != 0 or self.usage != Usage()

    def __add__(self, other: Metered) -> Metered:
        return Metered(self.usage + other.usage, self.model_calls + other.model_calls)

    def __sub__(self, other: Metered) -> Metered:
        a, b = self.usage, other.usage
        less = Usage(
            a.input_tokens - b.input_tokens,
            a.output_tokens - b.output_tokens,
            a.cache_creation_input_tokens - b.cache_creation_input_tokens,
            a.cache_read_input_tokens - b.cache_read_input_tokens,
        )
        return Metered(less, self.model_calls - other.model_calls)

    def plus(self, usage: Usage) -> Metered:
        """One more call that used ``usage``."""
        return Metered(self.usage + usage, self.model_calls + 1)

    def tokens(self) -> float:
        """What a token allowance counts: billed input-token equivalents plus output tokens."""
        return self.usage.billed_input() + self.usage.output_tokens

    def as_json(self) -> dict[str, int]:
        """The four counts and ``modelCalls``."""
        return {**self.usage.as_json(), "modelCalls": self.model_calls}

    @staticmethod
    def from_json(d: Mapping[str, object] | None) -> Metered:
        """Parse :meth:`as_json`'s form (None or empty: nothing used)."""
        if not d:
            return Metered()
        calls = d.get("modelCalls", 0)
        return Metered(Usage.from_json(d), int(calls) if isinstance(calls, int | float) else 0)

    def packed(self) -> list[int]:
        """The stored form, small (a turn's head is billed per KB): the four counts, then the calls."""
        u = self.usage
        counts = [u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens]
        return [*counts, self.model_calls]

    @staticmethod
    def unpacked(stored: object) -> Metered:
        """Parse :meth:`packed`'s form (None: nothing used; :meth:`as_json`'s form is read too)."""
        if isinstance(stored, Mapping):
            return Metered.from_json(stored)
        if not isinstance(stored, list | tuple) or len(stored) != 5:
            return Metered()
        i, o, w, r, calls = (int(v) for v in stored)
        return Metered(Usage(i, o, w, r), calls)

    @staticmethod
    def total(parts: Iterable[Metered]) -> Metered:
        """The sum of ``parts``."""
        out = Metered()
        for part in parts:
            out = out + part
        return out


def day_of(at: float) -> str:
    """The UTC day of a Unix time, ``YYYY-MM-DD``."""
    return time.strftime(DAY_FORMAT, time.gmtime(at))


def next_day_at(at: float) -> float:
    """The Unix time the UTC day after the one of ``at`` begins."""
    return (int(at) // 86_400 + 1) * 86_400.0


@dataclass(frozen=True, slots=True)
class Tally:
    """Usage to add to the daily counter of (tenant, agent, day); ``turn_id`` picks the counter's shard."""

    tenant: str
    agent: str
    day: str
    turn_id: str
    metered: Metered


@dataclass(frozen=True, slots=True)
class DailyUsage:
    """What one agent of one tenant used on one UTC day."""

    tenant: str
    agent: str
    day: str
    metered: Metered

    def to_dict(self) -> dict[str, object]:
        """``GET /usage``'s entry."""
        return {"tenant": self.tenant, "agent": self.agent, "day": self.day, "usage": self.metered.as_json()}
