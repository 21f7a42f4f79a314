"""Messages: blocks round-trip through the Messages API shape; the tool protocol is checked."""

from __future__ import annotations

from typing import Any

import pytest

from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    block_from_dict,
    check_protocol,
)

BLOCKS = [
    TextBlock("hello"),
    TextBlock(""),
    ToolUseBlock("toolu_1", "lookup_order", {"order_id": "A-1001", "nested": {"a": [1, 2.5, None]}}),
    ToolUseBlock("toolu_2", "noop", {}),
    ToolResultBlock("toolu_1", '{"status": "ok"}'),
    ToolResultBlock("toolu_2", "plain text answer", is_error=True),
]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: type(b).__name__)
def test_every_block_round_trips(block: Any) -> None:
    data = block.to_dict()
    assert data["type"] == block.type
    assert block_from_dict(data) == block


def test_wire_shapes_are_the_messages_api_ones() -> None:
    assert TextBlock("hi").to_dict() == {"type": "text", "text": "hi"}
    assert ToolUseBlock("t", "n", {"a": 1}).to_dict() == {
        "type": "tool_use",
        "id": "t",
        "name": "n",
        "input": {"a": 1},
    }
    assert ToolResultBlock("t", "x").to_dict() == {"type": "tool_result", "tool_use_id": "t", "content": "x"}
    assert ToolResultBlock("t", "x", True).to_dict()["is_error"] is True


def test_message_round_trips() -> None:
    for role in ("user", "assistant"):
        msg = Message(role, tuple(BLOCKS))  # type: ignore[arg-type]
        assert Message.from_dict(msg.to_dict()) == msg
    assert Message.from_dict({"role": "user", "content": "just text"}) == Message.user_text("just text")


def test_non_string_tool_result_content_is_kept_as_json_text() -> None:
    block = block_from_dict({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text"}]})
    assert isinstance(block, ToolResultBlock)
    assert block.content == '[{"type": "text"}]'


@pytest.mark.parametrize(
    "data",
    [{"type": "image", "source": {}}, {"text": "no type"}],
)
def test_unknown_blocks_are_rejected(data: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        block_from_dict(data)


def test_unknown_roles_are_rejected() -> None:
    with pytest.raises(InvalidInput):
        Message.from_dict({"role": "system", "content": []})


def test_message_helpers() -> None:
    msg = Message("assistant", (TextBlock("a"), ToolUseBlock("t1", "x", {}), TextBlock("b")))
    assert msg.text == "a\nb"
    assert [u.id for u in msg.tool_uses] == ["t1"]
    assert Message("user", (ToolResultBlock("t1", "r"),)).tool_results == [ToolResultBlock("t1", "r")]


# -- the tool protocol --------------------------------------------------------------------------


def user(text: str = "hi") -> Message:
    return Message.user_text(text)


def asks(*ids: str, text: str | None = None) -> Message:
    blocks: list[Any] = [TextBlock(text)] if text else []
    blocks += [ToolUseBlock(i, "tool", {}) for i in ids]
    return Message("assistant", tuple(blocks))


def answers(*ids: str, extra: tuple[Any, ...] = ()) -> Message:
    return Message("user", tuple(ToolResultBlock(i, "ok") for i in ids) + extra)


def says(text: str = "done") -> Message:
    return Message("assistant", (TextBlock(text),))


VALID = {
    "empty": [],
    "one question": [user()],
    "plain chat": [user(), says(), user("again"), says()],
    "one round": [user(), asks("a"), answers("a"), says()],
    "parallel calls answered in another order": [user(), asks("a", "b", "c"), answers("c", "a", "b"), says()],
    "text before the calls": [user(), asks("a", text="let me check"), answers("a"), says()],
    "text after the results": [user(), asks("a"), answers("a", extra=(TextBlock("thanks"),)), says()],
    "chained rounds": [user(), asks("a"), answers("a"), asks("b", "c"), answers("b", "c"), says()],
    "dangling batch at the end (parked)": [user(), asks("a"), answers("a"), asks("b")],
    "new message after a turn that ended on results": [user(), asks("a"), answers("a"), user("and?")],
}

INVALID = {
    "unanswered call": [user(), asks("a", "b"), answers("a"), says()],
    "unanswered, assistant follows": [user(), asks("a"), says()],
    "duplicated result": [user(), asks("a"), answers("a", "a"), says()],
    "result for a call never made": [user(), asks("a"), answers("a", "z"), says()],
    "result a message too late": [user(), asks("a"), user("wait"), answers("a")],
    "result without any call": [user(), says(), answers("a")],
    "result in the first message": [answers("a"), says()],
    "result in an assistant message": [user(), Message("assistant", (ToolResultBlock("a", "x"),))],
    "result answering an older batch again": [user(), asks("a"), answers("a"), says(), answers("a")],
    "tool_use from the user": [Message("user", (ToolUseBlock("a", "tool", {}),)), answers("a")],
    "results after a new user message": [user(), asks("a"), user("wait"), answers("a")],
    "text before the results": [
        user(),
        asks("a"),
        answers(extra=(TextBlock("x"), ToolResultBlock("a", "r"))),
    ],
    "same tool_use id twice in one batch": [user(), asks("a", "a"), answers("a", "a"), says()],
    "tool_use id reused by a later batch": [user(), asks("a"), answers("a"), asks("a"), answers("a")],
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_check_protocol_accepts_valid_histories(name: str) -> None:
    check_protocol(VALID[name])


@pytest.mark.parametrize("name", sorted(INVALID))
def test_check_protocol_rejects_broken_histories(name: str) -> None:
    with pytest.raises(InvalidInput):
        check_protocol(INVALID[name])
