"""The model bill on every store: daily usage counters, usage on turns, and session compactions."""

from __future__ import annotations

import dataclasses

import pytest

from loopengine.app.ports import Append, Change, Compact, Stores
from loopengine.domain import outbox
from loopengine.domain.base.ids import new_id
from loopengine.domain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from loopengine.domain.tokens.context_window import ELIDED, Compaction
from loopengine.domain.tokens.metering import DailyUsage, Metered, Tally
from loopengine.domain.tokens.usage import Usage
from loopengine.domain.turns import CallRecord, TurnStatus
from tests.contract import T0, checkpoint, turn

DAY = "2027-01-15"


def _tally(tenant: str, agent: str, usage: Usage, calls: int = 1, day: str = DAY) -> Tally:
    return Tally(tenant, agent, day, new_id("turn_"), Metered(usage, calls))


def test_tallies_add_up_per_tenant_agent_and_day(stores: Stores) -> None:
    running = turn()
    stores.turns.create_turn(running)
    tallies = [
        _tally("acme", "shop", Usage(100, 10, 5, 1)),
        _tally("acme", "shop", Usage(200, 20, 0, 300), calls=2),  # another shard, most likely
        _tally("acme", "desk", Usage(7, 1)),
        _tally("acme", "shop", Usage(1000, 1), day="2027-01-16"),
        _tally("other", "shop", Usage(50, 5)),
    ]
    current = running
    for tally in tallies:  # each rides in a turn's write, as a pause's or a finish's does
        current = stores.turns.commit(Change(running.turn_id, turn=current, tally=tally)).turn or current

    shop = DailyUsage("acme", "shop", DAY, Metered(Usage(300, 30, 5, 301), 3))
    desk = DailyUsage("acme", "desk", DAY, Metered(Usage(7, 1), 1))
    assert stores.turns.daily_usage("acme", DAY) == [desk, shop]
    assert stores.turns.daily_usage("acme", DAY, "shop") == [shop]
    assert stores.turns.daily_usage("acme", DAY, "sho") == []
    assert stores.turns.daily_usage("acme", "2027-01-14") == []
    assert stores.turns.daily_usage("other", DAY) == [
        DailyUsage("other", "shop", DAY, Metered(Usage(50, 5), 1))
    ]


def test_a_counter_moves_only_with_the_write_it_rides_in(stores: Stores) -> None:
    running = turn()
    stores.turns.create_turn(running)
    moved = stores.turns.replace_turn(dataclasses.replace(running, lease_until=running.lease_until + 1))
    with pytest.raises(Exception, match="version"):
        stores.turns.commit(Change(running.turn_id, turn=running, tally=_tally("acme", "shop", Usage(9, 9))))
    assert stores.turns.daily_usage("acme", DAY) == []
    stores.turns.commit(Change(running.turn_id, turn=moved, tally=_tally("acme", "shop", Usage(9, 9))))
    assert stores.turns.daily_usage("acme", DAY)[0].metered == Metered(Usage(9, 9), 1)


def test_a_turns_usage_round_trips(stores: Stores) -> None:
    running = turn()
    stores.turns.create_turn(running)
    used = Metered(Usage(12_345, 678, 2_000, 30_000), 4)
    done = dataclasses.replace(
        running, status=TurnStatus.FINISHED, metered=used, counted=Metered(Usage(1), 1)
    )
    stored = stores.turns.commit(Change(running.turn_id, turn=done)).turn
    again = stores.turns.get_turn(running.turn_id)
    assert stored is not None and again == stored
    assert (again.metered, again.counted) == (used, Metered(Usage(1), 1))


def _exchange(n: int) -> list[Message]:
    """One exchange: a question, a tool call, its result, an answer."""
    use = ToolUseBlock(f"toolu_{n}", "lookup_order", {"order_id": f"A-{n}"})
    return [
        Message.user_text(f"question {n}"),
        Message("assistant", (use,)),
        Message("user", (ToolResultBlock(use.id, f'{{"order": {n}}}'),)),
        Message("assistant", (TextBlock(f"answer {n}"),)),
    ]


def _session(stores: Stores, exchanges: int, *, one_append: bool = False) -> tuple[str, list[Message], str]:
    """A session of ``exchanges`` exchanges (appended one by one, or all at once) and a turn to write with."""
    key = new_id("s_")
    messages = [m for n in range(exchanges) for m in _exchange(n)]
    if one_append:
        stores.sessions.append(key, messages, 0)
    else:
        for start in range(0, len(messages), 4):
            stores.sessions.append(key, messages[start : start + 4], start)
    running = turn(session_id=key)
    stores.turns.create_turn(running)
    return key, messages, running.turn_id


def _compact(stores: Stores, key: str, turn_id: str, compaction: Compaction) -> None:
    current = stores.turns.get_turn(turn_id)
    assert current is not None
    stores.turns.commit(Change(turn_id, turn=current, compact=Compact(key, compaction)))


def test_a_session_never_compacted_is_read_whole(stores: Stores) -> None:
    key, messages, _ = _session(stores, 3)
    history = stores.sessions.load_since_compaction(key)
    assert (history.start, history.compaction, list(history)) == (0, None, messages)
    assert stores.sessions.load_since_compaction(new_id("s_")) == []
    assert stores.sessions.compactions(key) == []


@pytest.mark.parametrize(
    ("exchanges", "one_append", "up_to"),
    [(3, False, 8), (60, False, 232), (60, False, 20), (60, True, 233), (60, True, 22)],
)
def test_a_step_reads_from_the_latest_compaction_and_the_session_keeps_everything(
    stores: Stores, exchanges: int, one_append: bool, up_to: int
) -> None:
    """60 exchanges are 240 messages: from a compaction far back, the read from the end takes more than
    a page. One append of them all is stored three messages to an item; a compaction may fall inside
    one (233, 22)."""
    key, messages, turn_id = _session(stores, exchanges, one_append=one_append)
    first, latest = Compaction(4, "they asked about order 0"), Compaction(up_to, "the orders before")
    _compact(stores, key, turn_id, first)
    _compact(stores, key, turn_id, latest)

    history = stores.sessions.load_since_compaction(key)
    assert history.start == latest.up_to and history.compaction == latest
    assert len(history) == len(messages)
    assert history.live() == messages[latest.up_to :]
    assert all(m is ELIDED for m in history[: latest.up_to])
    assert stores.sessions.load(key) == messages, "nothing is deleted"
    assert stores.sessions.compactions(key) == [first, latest]


def test_an_append_after_a_compaction_lands_where_the_history_ends(stores: Stores) -> None:
    key, messages, turn_id = _session(stores, 3)
    _compact(stores, key, turn_id, Compaction(8, "two exchanges"))
    history = stores.sessions.load_since_compaction(key)
    more = [Message.user_text("and another thing")]
    current = stores.turns.get_turn(turn_id)
    assert current is not None
    stores.turns.commit(Change(turn_id, turn=current, append=Append(key, tuple(more), len(history))))
    stores.sessions.append(key, [Message("assistant", (TextBlock("sure"),))], len(history) + 1)
    again = stores.sessions.load_since_compaction(key)
    assert again.live() == [*messages[8:], *more, Message("assistant", (TextBlock("sure"),))]
    assert len(stores.sessions.load(key)) == len(messages) + 2


def test_a_delivery_and_its_audit_event_are_one_write_read_back_in_order(stores: Stores) -> None:
    running = turn()
    stores.turns.create_turn(running)
    note = outbox.new_record("evt_1", running.turn_id, "customer-service", "h1", "approval", {"x": 1}, T0)
    before, after = {"type": "paused", "at": T0}, {"type": "resumed", "at": T0 + 2}
    notified = {"type": "notified", "at": T0 + 1, "eventId": "evt_1", "target": "t0", "channel": "webhook"}
    stores.turns.commit(Change(running.turn_id, turn=running, events=(before,), outbox=(note,)))
    stores.turns.put_outbox(outbox.delivered(note), (notified,))
    current = stores.turns.get_turn(running.turn_id)
    assert current is not None
    stores.turns.commit(Change(running.turn_id, turn=current, events=(after,)))

    assert stores.turns.events(running.turn_id) == [before, notified, after]
    assert stores.turns.due_outbox(T0 + 10**6) == []


def test_a_checkpoint_and_a_config_are_read_together(stores: Stores) -> None:
    cp = checkpoint()
    stores.checkpoints.create(cp)
    stores.turns.put_config("sha256:abc", {"name": "shop", "tools": []})
    assert stores.checkpoints.get_with_config(cp.id, "sha256:abc") == (cp, {"name": "shop", "tools": []})
    assert stores.checkpoints.get_with_config(cp.id, None) == (cp, None)
    assert stores.checkpoints.get_with_config("cp_gone", "sha256:none") == (None, None)


def test_a_new_turns_config_snapshot_is_stored_with_it(stores: Stores) -> None:
    first, second = turn(), turn()
    snapshot = {"name": "shop", "system": "be kind"}
    stores.turns.commit(Change(first.turn_id, new_turn=first, config=("sha256:cfg", snapshot)))
    stores.turns.commit(Change(second.turn_id, new_turn=second, config=("sha256:cfg", snapshot)))
    assert stores.turns.get_config("sha256:cfg") == snapshot


def test_a_result_the_change_stores_in_its_answer_is_not_stored_again_with_the_call(stores: Stores) -> None:
    running = turn()
    stores.turns.create_turn(running)
    result = ToolResultBlock("toolu_a", '{"blob": "' + "z" * 2000 + '"}')
    other = ToolResultBlock("toolu_b", '{"ok": true}')
    ran = [
        CallRecord(running.turn_id, "toolu_a", "lookup", T0, "ok", result.to_dict(), T0 + 1),
        CallRecord(running.turn_id, "toolu_b", "lookup", T0, "ok", other.to_dict(), T0 + 1),
    ]
    answer = Append(running.session_key, (Message("user", (result,)),), 0)
    stores.turns.commit(Change(running.turn_id, turn=running, append=answer, calls=tuple(ran)))
    calls = stores.turns.calls(running.turn_id)
    assert (calls["toolu_a"].outcome, calls["toolu_a"].result) == ("ok", None), "the answer holds it"
    assert calls["toolu_b"].result == other.to_dict(), "not in the answer: kept with the call"
    assert stores.sessions.load(running.session_key)[0].tool_results == [result]
