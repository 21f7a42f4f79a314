"""Queued messages waiting behind parked turns must not starve the sweep (both stores).

A queued turn is due at once so the sweep starts it when its session frees up. While the session is
still busy (a turn parked for days), it stays due; before the fix every sweep read the same page of
blocked queued turns first and never reached a turn whose resume invoke was lost behind them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from loopengine.app.engine import Engine
from loopengine.app.invokers import RecordingInvoker
from loopengine.app.ports import Stores
from loopengine.app.request.resolution import Decider
from loopengine.app.runtime import Runtime
from loopengine.app.worker import sweep
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.decisions import Approval
from loopengine.domain.turns import TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from loopengine.stores.dynamodb import open_dynamodb_stores
from loopengine.stores.sqlite import open_sqlite_stores
from tests.contract.conftest import moto_dynamodb
from tests.harness import Calls, StaticAgents, agent

TABLE = "loopengine-sweep-queued"
PAGE = 3  # the sweep's page size here (100 in production)


@contextmanager
def _stores(store: str, tmp: Path, clock: FakeClock) -> Iterator[Stores]:
    if store == "sqlite":
        stores = open_sqlite_stores(str(tmp / "q.db"), clock)
        yield stores
        stores.close()
        return
    with moto_dynamodb(TABLE) as client:
        stores = open_dynamodb_stores(TABLE, clock, client=client)
        yield stores
        stores.close()


@pytest.mark.parametrize("store", ["sqlite", "dynamodb"])
def test_blocked_queued_turns_do_not_starve_a_lost_resume(store: str, tmp_path: Path) -> None:
    calls = Calls()
    config = agent(
        "q", [calls.tool("refund")], {"rules": [], "default_decision": "ask"}, on_new_message="queue"
    )
    model = ScriptedModel.from_list([call(use("refund", {"x": 1})), say("done")])
    clock = FakeClock()
    with _stores(store, tmp_path, clock) as stores:
        invoker = RecordingInvoker()
        rt = Runtime(stores, StaticAgents(config), lambda _c: model, lambda _c: None, invoker)
        engine = Engine(rt)
        queued = []
        for i in range(PAGE):  # a page full of queued messages behind parked turns
            assert engine.send_message("q", "go", session_id=f"parked-{i}").status is TurnStatus.PAUSED
            clock.advance(0.001)  # a turn's place in its session is its creation time
            queued.append(engine.send_message("q", "later", session_id=f"parked-{i}").turn_id)
        clock.advance(1)
        victim = engine.send_message("q", "go", session_id="victim")
        engine.resolve(victim.pending[0].pending_id, Approval(), Decider("alice"))
        invoker.invoked.clear()  # the resume invoke was lost: only the sweep can find the turn

        clock.advance(rt.handoff_grace + 1)
        handed_on: list[str] = []
        for _ in range(2):
            sweep.sweep(rt, limit=PAGE)
            handed_on += invoker.invoked
            invoker.invoked.clear()
        assert victim.turn_id in handed_on
        assert not set(queued) & set(handed_on)  # their sessions are still busy
        assert [engine.turn(t).status for t in queued] == [TurnStatus.QUEUED] * PAGE

        for i in range(PAGE):  # the queued ones still start once their sessions free up
            parked = stores.turns.session_turns(f"parked-{i}")[0]
            [item] = engine.outcome(parked.turn_id).pending
            engine.resolve(item.pending_id, Approval(), Decider("alice"))
        while invoker.invoked:
            engine.resume(invoker.invoked.pop(0))
        assert [engine.turn(t).status for t in queued] == [TurnStatus.FINISHED] * PAGE  # they ran
