"""The sweep moves on a bounded batch of due turns per pass, and a failing turn never holds up the rest.

Thirty approved refunds whose resume invokes were lost are due at once. One pass hands on at most
``Runtime.sweep_batch`` (``LOOPENGINE_SWEEP_BATCH``, 20) of them, the earliest due first; a turn it
handed on is due again only after the hand-off grace, so the next pass reaches the other ten even
though the first twenty were never claimed (their resumes keep failing). Both stores.
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
from loopengine.bootstrap import build_runtime
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.decisions import Approval
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from loopengine.stores.dynamodb import open_dynamodb_stores
from loopengine.stores.sqlite import open_sqlite_stores
from tests.contract.conftest import moto_dynamodb
from tests.harness import Calls, StaticAgents, agent

TABLE = "loopengine-sweep-batches"
DUE = 30


@contextmanager
def _stores(store: str, tmp: Path, clock: FakeClock) -> Iterator[Stores]:
    if store == "sqlite":
        stores = open_sqlite_stores(str(tmp / "sweep.db"), clock)
        yield stores
        stores.close()
        return
    with moto_dynamodb(TABLE) as client:
        stores = open_dynamodb_stores(TABLE, clock, client=client, index_shards=4)
        yield stores
        stores.close()


@pytest.mark.parametrize("store", ["sqlite", "dynamodb"])
def test_a_pass_hands_on_a_bounded_batch_and_the_next_reaches_the_rest(store: str, tmp_path: Path) -> None:
    clock, calls = FakeClock(), Calls()
    config = agent("shop", [calls.tool("refund")], {"rules": [], "default_decision": "ask"})
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="r1")), say("done")])
    with _stores(store, tmp_path, clock) as stores:
        invoker = RecordingInvoker()
        rt = Runtime(stores, StaticAgents(config), lambda _c: model, lambda _c: None, invoker)
        assert rt.sweep_batch == 20
        engine = Engine(rt)
        turns = []
        for i in range(DUE):
            out = engine.send_message("shop", "refund it", session_id=f"ses_{i:02d}")
            engine.resolve(out.pending[0].pending_id, Approval(), Decider("ops@example.com"))
            turns.append(out.turn_id)
            clock.advance(0.01)  # due one after another: the earliest due first
        invoker.invoked.clear()  # every resume invoke was lost: only the sweep can find them
        clock.advance(rt.handoff_grace + 1)

        first = engine.sweep()
        assert (first.recovered, invoker.invoked) == (20, turns[:20])
        invoker.invoked.clear()  # those resumes fail too
        second = engine.sweep()  # at once: the twenty handed on are not due again yet
        assert (second.recovered, invoker.invoked) == (10, turns[20:])
        invoker.invoked.clear()
        assert engine.sweep().recovered == 0
        clock.advance(rt.handoff_grace + 1)  # past the grace all thirty are due again: a batch of them
        assert engine.sweep().recovered == 20 and len(set(invoker.invoked) & set(turns)) == 20

        for turn_id in turns:  # the resume function works again
            engine.resume(turn_id)
        assert [engine.turn(t).stop_reason for t in turns] == [StopReason.END_TURN] * DUE
        assert all(engine.turn(t).status is TurnStatus.FINISHED for t in turns)
        assert calls.count("refund") == DUE


def test_the_batch_is_a_setting(tmp_path: Path) -> None:
    env = {"LOOPENGINE_DB": str(tmp_path / "x.db"), "LOOPENGINE_SWEEP_BATCH": "7"}
    rt = build_runtime(env, invoker=RecordingInvoker())
    try:
        assert rt.sweep_batch == 7
    finally:
        rt.stores.close()
