"""A session within its model's context window: measuring a prompt, and where to compact (no I/O).

agent.yaml ``context: {window_tokens, compact_at, strategy}`` is a :class:`ContextPolicy`. Before a
model call the prompt is measured (:func:`estimate`, a local estimate that errs high: a third of a
token per character of the request's JSON, a whole one per character outside ASCII, plus the API's
own overheads); past ``compact_at`` of the window (or past what leaves room for ``max_tokens``), the
oldest whole exchanges are compacted (:func:`plan_cut`) down to about half the window, so the next
compaction is far off and the cached prefix keeps hitting in between. What the model is sent
(:func:`request_messages`) starts at the latest compaction, with its summary; a single tool result
larger than a quarter of the window is cut there, with a marker saying how much (the record keeps it
whole).

A session's history as a step reads it is a :class:`History`: the messages since its latest
:class:`Compaction` (``{"upTo": n, "summary"?: text}``: messages before index ``n`` are no longer
sent to the model; the summary, if any, stands in for them). Nothing is deleted: the session keeps
every message, and ``GET /sessions/{id}`` shows them all with the compaction markers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.base.stored import Stored, StoredForm
from loopengine.domain.messages import Message, TextBlock, ToolResultBlock

Strategy = Literal["summarize", "trim"]
DEFAULT_WINDOW = 200_000
"""Claude's context window, in tokens."""
CHARS_PER_TOKEN = 3.0
"""ASCII characters of the request's JSON per token, on the high side (English text runs about 4,
JSON with ids and numbers about 3; the JSON's own keys and quotes make the estimate err higher still)."""
TOOLS_OVERHEAD = 400
"""Tokens the API adds to a request with tools (its tool-use system prompt)."""
MESSAGE_OVERHEAD = 5
"""Tokens per message for its role and turn markers."""
TARGET_SHARE = 0.6
"""A compaction goes down to this share of the threshold (0.48 of the window at ``compact_at`` 0.8)."""
SUMMARY_SHARE = 0.05
"""Room left in the window for a summary, as a share of it (at most :data:`SUMMARY_MAX_TOKENS`)."""
SUMMARY_MAX_TOKENS = 2048
SUMMARY_OPEN = "<summary of the earlier conversation>"
SUMMARY_CLOSE = "</summary of the earlier conversation>"


@dataclass(frozen=True, slots=True)
class Compaction(StoredForm):
    """Messages before ``up_to`` are replaced: by ``summary``, or (trimmed) by nothing."""

    up_to: int
    summary: str | None = None


Compaction.stored = Stored(Compaction)
"""The stored and shown form: ``{"upTo": n, "summary"?: text}``."""


ELIDED = Message("user", ())
"""What stands at the index of a message the step did not read (before its compaction)."""


class History(list[Message]):
    """A session's messages at their own indexes, read from ``start`` on (earlier ones are :data:`ELIDED`).

    It is the list the loop has always used (``len`` is the session's length, ``h[i]`` message ``i``,
    ``h[-1]`` the last), so appends and checkpoints keep their indexes; ``compaction`` is the latest
    compaction (``start`` is its ``up_to``), whose summary the model is sent in place of the rest.
    """

    __slots__ = ("compaction", "start")

    def __init__(
        self, messages: Iterable[Message] = (), start: int = 0, compaction: Compaction | None = None
    ) -> None:
        super().__init__([ELIDED] * start)
        self.extend(messages)
        self.start = start
        self.compaction = compaction

    def live(self) -> list[Message]:
        """The messages read: from ``start`` on."""
        return self[self.start :]

    def compact(self, compaction: Compaction) -> None:
        """Drop what ``compaction`` replaces from the messages read."""
        up_to = min(compaction.up_to, len(self))
        self[self.start : up_to] = [ELIDED] * (up_to - self.start)
        self.start, self.compaction = up_to, compaction


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    """agent.yaml ``context:``; the defaults apply to an agent that says nothing."""

    window_tokens: int = DEFAULT_WINDOW
    compact_at: float = 0.8
    strategy: Strategy = "summarize"

    def threshold(self, max_tokens: int) -> int:
        """Tokens a prompt may have before the session is compacted (room left for the answer)."""
        return max(1, min(int(self.window_tokens * self.compact_at), self.window_tokens - max_tokens))

    def target(self, max_tokens: int) -> int:
        """Tokens a compaction aims the prompt at."""
        return int(self.threshold(max_tokens) * TARGET_SHARE)

    def summary_tokens(self) -> int:
        """The longest summary asked for."""
        return max(256, min(SUMMARY_MAX_TOKENS, int(self.window_tokens * SUMMARY_SHARE)))

    def result_chars(self) -> int:
        """The longest tool result sent whole: a quarter of the window, in characters."""
        return int(self.window_tokens / 4 * CHARS_PER_TOKEN)

    def to_dict(self) -> JsonDict:
        """agent.yaml's form (the snapshot's)."""
        return {"window_tokens": self.window_tokens, "compact_at": self.compact_at, "strategy": self.strategy}

    @staticmethod
    def from_dict(d: JsonDict) -> ContextPolicy:
        """Parse :meth:`to_dict`'s form."""
        strategy: Strategy = "trim" if d.get("strategy") == "trim" else "summarize"
        return ContextPolicy(int(d["window_tokens"]), float(d["compact_at"]), strategy)


def tokens_of(text: str) -> int:
    """The estimate for ``text``: a third of a token per ASCII character, a token per other one."""
    extra = len(text.encode("utf-8")) - len(text)  # 1 for a 2-byte character, 2 for 3, 3 for 4
    return math.ceil((len(text) + extra) / CHARS_PER_TOKEN)


def message_tokens(message: Message) -> int:
    """One message's share of a prompt."""
    return tokens_of(json.dumps(message.to_dict(), ensure_ascii=False)) + MESSAGE_OVERHEAD


def estimate(system: str, tools: Sequence[JsonDict], messages: Sequence[Message]) -> int:
    """Tokens of a request, on the high side."""
    fixed = tokens_of(json.dumps([system, list(tools)], ensure_ascii=False))
    return fixed + (TOOLS_OVERHEAD if tools else 0) + sum(message_tokens(m) for m in messages)


def is_exchange_start(message: Message) -> bool:
    """A user message that answers no tool_use: the history may start here with its protocol whole."""
    return message.role == "user" and not message.tool_results


def plan_cut(history: History, keep_from: int, room: int) -> int | None:
    """Where the compacted history should start: the first exchange after which ``room`` tokens suffice.

    Exchanges start at a user message answering no tool_use, after the history's current start and
    no later than ``keep_from`` (the current turn's first message: its messages are never dropped).
    When even the latest one leaves more than ``room``, the latest; ``None`` when there is none.
    """
    last = min(keep_from, len(history) - 1)
    starts = [i for i in range(history.start + 1, last + 1) if is_exchange_start(history[i])]
    if not starts:
        return None
    sizes = [message_tokens(history[i]) for i in range(starts[0], len(history))]
    after = sum(sizes)
    chosen = set(starts)
    for i, size in enumerate(sizes, starts[0]):
        if i in chosen and after <= room:
            return i
        after -= size
    return starts[-1]


def request_messages(history: History, policy: ContextPolicy) -> list[Message]:
    """What the model is sent: the history from its latest compaction, joined, cut, summary first.

    Consecutive user messages are joined into one (a new message after a turn that ended on tool
    results), as the Messages API does; a tool result over a quarter of the window is cut with a
    marker; the latest compaction's summary leads the first message.
    """
    out: list[Message] = []
    limit = policy.result_chars()
    for msg in history.live():
        blocks = tuple(_cut(b, limit) if isinstance(b, ToolResultBlock) else b for b in msg.content)
        if out and msg.role == "user" and out[-1].role == "user":
            out[-1] = Message("user", (*out[-1].content, *blocks))
        else:
            out.append(Message(msg.role, blocks))
    summary = history.compaction.summary if history.compaction is not None else None
    if summary and out and out[0].role == "user":
        lead = TextBlock(f"{SUMMARY_OPEN}\n{summary}\n{SUMMARY_CLOSE}")
        out[0] = Message("user", (lead, *out[0].content))
    return out


def _cut(block: ToolResultBlock, limit: int) -> ToolResultBlock:
    if len(block.content) <= limit:
        return block
    cut = len(block.content) - limit
    marker = (
        f"\n[cut to fit the context window: the last {cut:,} of this result's {len(block.content):,} "
        "characters are not shown]"
    )
    return ToolResultBlock(block.tool_use_id, block.content[:limit] + marker, block.is_error)
