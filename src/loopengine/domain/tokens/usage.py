"""What a model call costs, in tokens, and how an agent asks for its prompt to be cached.

:class:`Usage` is one call's token counts as the Messages API reports them (Bedrock's are the same
four): ``input_tokens`` (the prompt billed at the full rate: what no cache breakpoint covered),
``output_tokens``, ``cache_creation_input_tokens`` (written to the prompt cache) and
``cache_read_input_tokens`` (read from it). Usages add up (``a + b``), so a turn's or a session's
usage is the sum of its calls'.

:meth:`Usage.billed_input` weighs them as the price list does, in *input-token equivalents*: a cache
write costs 1.25 times an input token (2 times for a one-hour entry), a cache read a tenth. The prompt
a call sent is :attr:`Usage.prompt_tokens` (all three input kinds), so ``billed_input / prompt_tokens``
is the share of the prompt a call paid for.

:class:`PromptCache` is agent.yaml's ``prompt_cache: {enabled, ttl}`` (on by default, five minutes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loopengine.domain.base.jsontypes import JsonDict

CacheTtl = Literal["5m", "1h"]
CACHE_WRITE = {"5m": 1.25, "1h": 2.0}
"""What writing one token to the prompt cache costs, in input tokens, by the entry's time to live."""
CACHE_READ = 0.1
"""What reading one token from the prompt cache costs, in input tokens."""
FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
"""The four counts, as the API and the ``usage`` JSON name them."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one model call, or the sum of several (``+``); all zero by default."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    @property
    def prompt_tokens(self) -> int:
        """Every prompt token the call(s) sent, cached or not: what they would bill with no cache."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def billed_input(self, ttl: CacheTtl = "5m") -> float:
        """The prompt as billed, in input-token equivalents: input + 1.25 x writes (2 x: 1h) + 0.1 x reads."""
        return (
            self.input_tokens
            + CACHE_WRITE[ttl] * self.cache_creation_input_tokens
            + CACHE_READ * self.cache_read_input_tokens
        )

    def as_json(self) -> JsonDict:
        """The four counts under their API names (the ``usage`` of a ``model_response`` event)."""
        return {name: getattr(self, name) for name in FIELDS}

    @staticmethod
    def from_json(data: object) -> Usage:
        """Read :meth:`as_json` (or an API ``usage`` object) back: missing, null or malformed counts are 0."""
        if not isinstance(data, dict):
            return Usage()
        counts = [data.get(name) for name in FIELDS]
        return Usage(*(c if isinstance(c, int) and not isinstance(c, bool) and c > 0 else 0 for c in counts))


@dataclass(frozen=True, slots=True)
class PromptCache:
    """agent.yaml ``prompt_cache:``: whether model calls mark cache breakpoints, and the entries' lifetime.

    ``5m`` (the default) suits a conversation whose calls come minutes apart; ``1h`` an agent whose
    resumes often come within the hour (its writes cost 2 x instead of 1.25 x).
    """

    enabled: bool = True
    ttl: CacheTtl = "5m"

    def cache_control(self) -> JsonDict:
        """The ``cache_control`` a breakpoint carries: ``{"type": "ephemeral"}`` (+ ``"ttl": "1h"``)."""
        return {"type": "ephemeral", "ttl": "1h"} if self.ttl == "1h" else {"type": "ephemeral"}

    def to_dict(self) -> JsonDict:
        """The snapshot form (agent.yaml's)."""
        return {"enabled": self.enabled, "ttl": self.ttl}

    @staticmethod
    def from_dict(data: JsonDict) -> PromptCache:
        """Read :meth:`to_dict` back."""
        ttl = data.get("ttl", "5m")
        return PromptCache(bool(data.get("enabled", True)), "1h" if ttl == "1h" else "5m")


DEFAULT_PROMPT_CACHE = PromptCache()
"""On, five minutes: what an agent gets without ``prompt_cache:``."""
