"""SessionStore contract: append-only history guarded by the expected length."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopengine.app.ports import Stores
from loopengine.domain.base.errors import VersionConflict
from loopengine.domain.base.ids import new_id
from loopengine.domain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

ASK = Message(
    "assistant",
    (
        TextBlock("Let me look that up."),
        ToolUseBlock("toolu_1", "lookup_order", {"order_id": "A-1001", "deep": {"n": [1, 2.5]}}),
        ToolUseBlock("toolu_2", "issue_refund", {"order_id": "A-1001", "amount": 212.0}),
    ),
)
ANSWER = Message(
    "user",
    (
        ToolResultBlock("toolu_1", '{"order_id": "A-1001", "status": "delivered"}'),
        ToolResultBlock("toolu_2", '{"status": "denied"}', is_error=True),
    ),
)


def test_an_unknown_session_is_empty(stores: Stores) -> None:
    assert stores.sessions.load(new_id("s_")) == []


def test_appends_accumulate_in_order(stores: Stores) -> None:
    session = new_id("s_")
    first = [Message.user_text("my order arrived broken")]
    rest = [ASK, ANSWER, Message("assistant", (TextBlock("Refund issued."),))]

    stores.sessions.append(session, first, expected_len=0)
    stores.sessions.append(session, rest[:2], expected_len=1)
    stores.sessions.append(session, rest[2:], expected_len=3)

    assert stores.sessions.load(session) == first + rest


def test_every_block_kind_round_trips_exactly(stores: Stores) -> None:
    session = new_id("s_")
    history = [Message.user_text("hi"), ASK, ANSWER]

    stores.sessions.append(session, history, expected_len=0)

    loaded = stores.sessions.load(session)
    assert loaded == history
    assert [m.to_dict() for m in loaded] == [m.to_dict() for m in history]


@pytest.mark.parametrize("expected_len", [0, 1, 3])
def test_a_wrong_expected_length_conflicts_and_writes_nothing(stores: Stores, expected_len: int) -> None:
    session = new_id("s_")
    stores.sessions.append(session, [Message.user_text("a"), ASK], expected_len=0)

    with pytest.raises(VersionConflict) as lost:
        stores.sessions.append(session, [ANSWER], expected_len=expected_len)

    assert lost.value.current == 2
    assert stores.sessions.load(session) == [Message.user_text("a"), ASK]


def test_sessions_are_independent(stores: Stores) -> None:
    one, two = new_id("s_"), new_id("s_")
    stores.sessions.append(one, [Message.user_text("one")], expected_len=0)
    stores.sessions.append(two, [Message.user_text("two")], expected_len=0)

    assert stores.sessions.load(one) == [Message.user_text("one")]
    assert stores.sessions.load(two) == [Message.user_text("two")]


def test_unicode_survives(stores: Stores) -> None:
    session = new_id("s_")
    text = 'Grüße — 返金してください 🙏 \u200b\u0000 "quoted" \\ back\nslash'
    message = Message("user", (ToolResultBlock("toolu_x", text), TextBlock(text)))

    stores.sessions.append(session, [message], expected_len=0)

    assert stores.sessions.load(session) == [message]


def test_a_one_megabyte_message_survives(stores: Stores) -> None:
    session = new_id("s_")
    big = "".join(chr(0x41 + i % 26) for i in range(1_000_000)) + "é✓"
    message = Message("user", (ToolResultBlock("toolu_big", big),))

    stores.sessions.append(session, [message], expected_len=0)
    stores.sessions.append(session, [Message("assistant", (TextBlock("ok"),))], expected_len=1)

    loaded = stores.sessions.load(session)
    assert loaded[0] == message
    assert len(loaded) == 2


_texts = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(batches=st.lists(st.lists(_texts, min_size=1, max_size=3), min_size=1, max_size=4))
def test_generated_batches_load_back_as_their_concatenation(stores: Stores, batches: list[list[str]]) -> None:
    session = new_id("s_")
    expected: list[Message] = []
    for batch in batches:
        messages = [Message.user_text(text) for text in batch]
        stores.sessions.append(session, messages, expected_len=len(expected))
        expected += messages

    assert stores.sessions.load(session) == expected
