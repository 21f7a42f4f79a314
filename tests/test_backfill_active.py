"""scripts/backfill_active.py: unfinished turns stored before ``ACTIVE#`` entries existed get theirs.

The engine finds the turns in a new message's way, and the next queued message, among a session's
``ACTIVE#`` entries; a turn from before those entries would be invisible there (issue 13's upgrade
caveat). On moto: entries removed as an older version would have stored the turns, then the script.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from loopengine.domain.base.clock import FakeClock
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.stores.dynamodb import open_dynamodb_stores
from loopengine.stores.dynamodb_items import active_key
from tests.contract import turn
from tests.contract.conftest import moto_dynamodb
from tests.script_support import load_script


def _script() -> Any:
    return load_script("backfill_active")


def test_unfinished_turns_get_their_entry_once_and_finished_ones_none(capsys: Any) -> None:
    with moto_dynamodb() as client:
        stores = open_dynamodb_stores("loopengine-test", FakeClock(), client=client)
        session = "s_upgrade"
        parked = turn(session, status=TurnStatus.PAUSED)
        queued = turn(session, created_at=parked.created_at + 1, status=TurnStatus.QUEUED)
        done = dataclasses.replace(
            turn(session, created_at=parked.created_at - 1),
            status=TurnStatus.FINISHED,
            stop_reason=StopReason.END_TURN,
        )
        for record in (parked, queued, done):
            stores.turns.create_turn(record)
            client.delete_item(TableName="loopengine-test", Key=active_key(record))  # as stored before
        assert stores.turns.unfinished_session_turns(parked.session_key) == []

        script = _script()
        assert script.main(["--table", "loopengine-test", "--dry-run"]) == 0
        assert stores.turns.unfinished_session_turns(parked.session_key) == []  # a dry run writes nothing
        table = stores.turns.table  # type: ignore[attr-defined]
        first = script.backfill(table)
        second = script.backfill(table)

        assert stores.turns.unfinished_session_turns(parked.session_key) == [parked, queued]
        assert first == {"turns": 3, "unfinished": 2, "created": 2, "present": 0}
        assert second == {"turns": 3, "unfinished": 2, "created": 0, "present": 2}  # idempotent
    assert "3 turn(s), 2 unfinished" in capsys.readouterr().out
