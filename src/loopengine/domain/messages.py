"""Messages and content blocks in the Anthropic Messages API shape.

A conversation is a list of :class:`Message` (``role`` user|assistant, ``content`` blocks).
Blocks are frozen dataclasses that round-trip through plain dicts exactly as the Messages API spells
them, so what is stored is what is sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.base.jsontypes import JsonDict

Role = Literal["user", "assistant"]


@dataclass(frozen=True, slots=True)
class TextBlock:
    """Plain text."""

    text: str
    type: Literal["text"] = "text"

    def to_dict(self) -> JsonDict:
        """Return the Messages API form."""
        return {"type": "text", "text": self.text}


@dataclass(frozen=True, slots=True)
class ToolUseBlock:
    """The model asks to call ``name`` with ``input``."""

    id: str
    name: str
    input: JsonDict
    type: Literal["tool_use"] = "tool_use"

    def to_dict(self) -> JsonDict:
        """Return the Messages API form."""
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}


@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    """The answer to one tool_use; ``content`` is text (JSON text for tool output)."""

    tool_use_id: str
    content: str
    is_error: bool = False
    type: Literal["tool_result"] = "tool_result"

    def to_dict(self) -> JsonDict:
        """Return the Messages API form."""
        out: JsonDict = {
            "type": "tool_result",
            "tool_use_id": self.tool_use_id,
            "content": self.content,
        }
        if self.is_error:
            out["is_error"] = True
        return out


Block = TextBlock | ToolUseBlock | ToolResultBlock


def block_from_dict(data: JsonDict) -> Block:
    """Parse one block from its Messages API form."""
    kind = data.get("type")
    if kind == "text":
        return TextBlock(text=str(data["text"]))
    if kind == "tool_use":
        return ToolUseBlock(id=str(data["id"]), name=str(data["name"]), input=dict(data["input"]))
    if kind == "tool_result":
        content = data.get("content", "")
        if not isinstance(content, str):
            content = json.dumps(content)
        return ToolResultBlock(
            tool_use_id=str(data["tool_use_id"]),
            content=content,
            is_error=bool(data.get("is_error", False)),
        )
    raise InvalidInput(f"unknown content block type {kind!r}")


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the conversation."""

    role: Role
    content: tuple[Block, ...] = field(default_factory=tuple)

    def to_dict(self) -> JsonDict:
        """Return the Messages API form."""
        return {"role": self.role, "content": [b.to_dict() for b in self.content]}

    @staticmethod
    def from_dict(data: JsonDict) -> Message:
        """Parse a message from its Messages API form."""
        role = data.get("role")
        if role not in ("user", "assistant"):
            raise InvalidInput(f"unknown role {role!r}")
        raw = data.get("content", [])
        if isinstance(raw, str):
            return Message(role=role, content=(TextBlock(raw),))
        return Message(role=role, content=tuple(block_from_dict(b) for b in raw))

    @staticmethod
    def user_text(text: str) -> Message:
        """Build a user message holding one text block."""
        return Message(role="user", content=(TextBlock(text),))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        """The tool_use blocks of this message, in order."""
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        """The tool_result blocks of this message, in order."""
        return [b for b in self.content if isinstance(b, ToolResultBlock)]

    @property
    def text(self) -> str:
        """All text blocks joined by newlines."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))


def check_protocol(history: list[Message]) -> None:
    """Raise ``InvalidInput`` unless every tool_use is answered once, in the very next message.

    This is the rule the Messages API enforces; the loop must never store a history that breaks it
    (a dangling tool_use at the very end is allowed: that is a parked or running batch). In detail:
    tool_use blocks appear only in assistant messages and their ids are unique; the message after
    one holding tool_use blocks is a user message whose tool_result blocks come first and answer
    each of them exactly once; tool_result blocks appear nowhere else. Two user messages in a row
    are fine (the API joins them): a new message after a turn that ended on tool results.
    """
    seen: set[str] = set()
    for i, msg in enumerate(history):
        uses = msg.tool_uses
        if uses and msg.role != "assistant":
            raise InvalidInput(f"message {i}: tool_use outside an assistant message")
        for use in uses:
            if use.id in seen:
                raise InvalidInput(f"message {i}: tool_use id {use.id!r} is used twice")
            seen.add(use.id)
        asked = history[i - 1].tool_uses if i > 0 else []
        answered = [r.tool_use_id for r in msg.tool_results]
        if not asked:
            if answered:
                raise InvalidInput(f"message {i}: tool_result that answers no tool_use of message {i - 1}")
            continue
        if msg.role != "user" or sorted(answered) != sorted(u.id for u in asked):
            raise InvalidInput(f"message {i}: does not answer each tool_use of message {i - 1} once")
        if any(not isinstance(b, ToolResultBlock) for b in msg.content[: len(answered)]):
            raise InvalidInput(f"message {i}: tool_result blocks must come before any other block")
