"""A Messages API stand-in's bill: tokens counted and the prompt cache kept as the real API keeps it.

:class:`TokenMeter` bills one request body (``POST /v1/messages``, or Bedrock's ``invoke`` body) the
way the API does, so a test or the bench can see what a request would cost:

* **tokens**: about four characters a token (:func:`tokens`) of each block's JSON (a tool definition,
  the system prompt, each content block of each message, ``cache_control`` left out), plus a few for
  each message's framing. Not Claude's tokenizer, but the same for the same bytes, which is all the
  cache needs.
* **the prompt cache**: the prompt is the blocks in the API's order (tools, then system, then the
  messages). A block with ``cache_control`` is a breakpoint; more than four is the API's 400. The
  cache holds prefixes, keyed by the model and the bytes of every block up to a breakpoint. A request
  *reads* the longest cached prefix that ends at one of its block boundaries no more than
  :data:`LOOKBACK` blocks before one of its breakpoints, and *writes* (on first sight) every prefix up
  to a breakpoint beyond that, if the prefix is at least ``min_tokens`` long (shorter ones are not
  cached, as the API's minimum cacheable length). An entry lives ``ttl`` seconds from its last use
  (``5m`` or ``1h``, by its breakpoint's ``cache_control``), on ``clock``.
* **the bill**: ``cache_read_input_tokens`` = the prefix read; ``cache_creation_input_tokens`` = from
  there to the last breakpoint written; ``input_tokens`` = the rest; ``output_tokens`` from the reply.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JsonDict = dict[str, Any]
LOOKBACK = 20
"""Block boundaries the API looks back from each breakpoint for a cached prefix."""
MAX_BREAKPOINTS = 4
MIN_TOKENS = 1024
"""The shortest prefix the API caches (Claude Sonnet's minimum cacheable length)."""
TTL = {"5m": 300.0, "1h": 3600.0}
MESSAGE_FRAMING = 4
"""Tokens a message costs besides its blocks (role and separators)."""


def tokens(text: str) -> int:
    """About four characters a token, rounded up."""
    return math.ceil(len(text) / 4)


class TooManyBreakpoints(ValueError):
    """The API's 400 for a request with more than four ``cache_control`` blocks."""


@dataclass(frozen=True)
class Bill:
    """What one request cost, and where its breakpoints were (indexes into its blocks)."""

    usage: JsonDict
    blocks: int
    breakpoints: tuple[int, ...]
    read_upto: int
    """The block the prefix read ends at (-1: nothing read)."""


def _strip(block: Any) -> Any:
    if isinstance(block, dict):
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def blocks_of(body: JsonDict) -> list[tuple[str, int, str | None]]:
    """The prompt's blocks in cache order: (canonical JSON, tokens, the breakpoint's ttl or None)."""
    out: list[tuple[str, int, str | None]] = []

    def add(block: Any, extra: int = 0) -> None:
        control = block.get("cache_control") if isinstance(block, dict) else None
        text = json.dumps(_strip(block), sort_keys=True, separators=(",", ":"))
        ttl = None if control is None else str(control.get("ttl", "5m"))
        out.append((text, tokens(text) + extra, ttl))

    for tool in body.get("tools") or []:
        add(tool)
    system = body.get("system")
    if isinstance(system, str) and system:
        add({"type": "text", "text": system})
    elif isinstance(system, list):
        for block in system:
            add(block)
    for message in body.get("messages") or []:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for i, block in enumerate(content):
            add({"role": message["role"], **block} if i == 0 else block, MESSAGE_FRAMING if i == 0 else 0)
    return out


@dataclass
class TokenMeter:
    """Bills requests (see the module docstring); ``bills`` keeps each request's :class:`Bill`."""

    min_tokens: int = MIN_TOKENS
    clock: Callable[[], float] = time.monotonic
    bills: list[Bill] = field(default_factory=list)
    _cache: dict[str, tuple[float, float]] = field(default_factory=dict)  # key -> (expires, ttl)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def bill(self, body: JsonDict, reply: JsonDict) -> JsonDict:
        """The ``usage`` of answering ``body`` with ``reply``; raises :class:`TooManyBreakpoints`."""
        blocks = blocks_of(body)
        marks = tuple(i for i, (_text, _n, ttl) in enumerate(blocks) if ttl is not None)
        if len(marks) > MAX_BREAKPOINTS:
            found = f"Found {len(marks)}."
            raise TooManyBreakpoints(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. {found}"
            )
        keys, sums, digest, total = [], [], hashlib.sha256(str(body.get("model", "")).encode()), 0
        for text, n, _ttl in blocks:
            digest.update(text.encode() + b"\x00")
            keys.append(digest.hexdigest())
            total += n
            sums.append(total)
        with self._lock:
            now = self.clock()
            read = self._read(keys, marks, now)
            written = self._write(keys, sums, blocks, marks, read, now)
            self._cache.update(written)
        cached = sums[read] if read >= 0 else 0
        last = max((b for b in marks if keys[b] in written), default=-1)
        created = sums[last] - cached if last >= 0 else 0
        output = tokens(json.dumps(reply.get("content", [])))
        usage = {
            "input_tokens": total - cached - created,
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": cached,
            "output_tokens": output,
        }
        self.bills.append(Bill(usage, len(blocks), marks, read))
        return usage

    def _read(self, keys: list[str], marks: tuple[int, ...], now: float) -> int:
        """The last block of the longest live cached prefix the breakpoints can see (-1: none); touched."""
        best = -1
        for mark in marks:
            for at in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                entry = self._cache.get(keys[at])
                if entry is not None and entry[0] > now:
                    best = max(best, at)
                    break
        if best >= 0:
            ttl = self._cache[keys[best]][1]
            self._cache[keys[best]] = (now + ttl, ttl)
        return best

    def _write(
        self,
        keys: list[str],
        sums: list[int],
        blocks: list[tuple[str, int, str | None]],
        marks: tuple[int, ...],
        read: int,
        now: float,
    ) -> dict[str, tuple[float, float]]:
        """The entries this request writes: each breakpoint past the prefix read, long enough to cache."""
        out = {}
        for mark in marks:
            if mark > read and sums[mark] >= self.min_tokens:
                ttl = TTL[blocks[mark][2] or "5m"]
                out[keys[mark]] = (now + ttl, ttl)
        return out


def billed_input(usage: JsonDict, write: float = 1.25) -> float:
    """A usage in input-token equivalents: input + 1.25 x writes (2 x for 1h) + 0.1 x reads."""
    return float(
        usage["input_tokens"]
        + write * usage["cache_creation_input_tokens"]
        + 0.1 * usage["cache_read_input_tokens"]
    )


def prompt_tokens(usage: JsonDict) -> int:
    """Every prompt token a request sent: what it would bill without a cache."""
    return int(
        usage["input_tokens"] + usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"]
    )
