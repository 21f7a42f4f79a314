"""What a model call used: the Messages API's ``usage`` as a typed value (no I/O).

The four counts are the API's own names. :meth:`Usage.billed_input` is what the input side of a call
costs in input-token equivalents: a cache write is billed at 1.25 times an input token (2 times for
the one-hour cache), a cache read at a tenth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

CACHE_WRITE = 1.25
"""A five-minute cache write, in input tokens."""
CACHE_WRITE_1H = 2.0
"""A one-hour cache write, in input tokens."""
CACHE_READ = 0.1
"""A cache read, in input tokens."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one model call (or a sum of calls)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    def as_json(self) -> dict[str, int]:
        """The API's form: the four counts by their names."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }

    @staticmethod
    def from_json(d: Mapping[str, object]) -> Usage:
        """Parse the API's form; a count that is missing or null is 0, other keys are ignored."""
        return Usage(
            _count(d.get("input_tokens")),
            _count(d.get("output_tokens")),
            _count(d.get("cache_creation_input_tokens")),
            _count(d.get("cache_read_input_tokens")),
        )

    def billed_input(self, ttl_hours: float = 0) -> float:
        """Input-token equivalents billed: input, cache writes (x1.25, x2 for 1 h), cache reads (x0.1)."""
        write = CACHE_WRITE_1H if ttl_hours >= 1 else CACHE_WRITE
        return (
            self.input_tokens
            + write * self.cache_creation_input_tokens
            + CACHE_READ * self.cache_read_input_tokens
        )


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))
