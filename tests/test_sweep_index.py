"""The sweep and the due index (both stores): a renewed lease is never swept, a dead runner is.

A lease renewal no longer moves the turn's due entry (issue 13: each one was an index write on one
hot partition). So a running turn's entry can come due while its runner is alive and renewing: the
sweep must then move the entry to the lease end (one write) and do nothing else. A runner that
died stops renewing, and the sweep after its lease ran out hands the turn on: still within a
lease plus one sweep interval of the last renewal.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from loopengine.app import faults
from loopengine.app.engine import Engine
from loopengine.app.invokers import RecordingInvoker
from loopengine.app.ports import Stores
from loopengine.app.runtime import Runtime
from loopengine.domain import outbox
from loopengine.domain import turn_state as ts
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.turns import TurnRecord, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from loopengine.stores.dynamodb import open_dynamodb_stores
from loopengine.stores.dynamodb_table import INDEX
from loopengine.stores.sqlite import open_sqlite_stores
from tests.contract import turn
from tests.contract.conftest import moto_dynamodb
from tests.harness import Calls, RecordingNotifier, StaticAgents, agent

TABLE = "loopengine-sweep-index"
LEASE = 60.0
SWEEP_INTERVAL = 60.0


@contextmanager
def _stores(store: str, tmp: Path, clock: FakeClock) -> Iterator[tuple[Stores, Any]]:
    if store == "sqlite":
        stores = open_sqlite_stores(str(tmp / "sweep.db"), clock)
        yield stores, None
        stores.close()
        return
    with moto_dynamodb(TABLE) as client:
        stores = open_dynamodb_stores(TABLE, clock, client=client, index_shards=4)
        yield stores, client
        stores.close()


class Crash(BaseException):
    """The process dies here."""


def _runtime(stores: Stores, invoker: Any, notifier: RecordingNotifier | None = None) -> Runtime:
    calls = Calls()
    config = agent("shop", [calls.tool("refund")], {"rules": [], "default_decision": "ask"})
    model = ScriptedModel.from_list([call(use("refund", {"x": 1}, id="r1")), say("done")])
    return Runtime(stores, StaticAgents(config), lambda _c: model, lambda _c: notifier, invoker)


def _claimed(stores: Stores, clock: FakeClock) -> TurnRecord:
    """A turn a live runner claimed just now, due (and leased) until one lease from now."""
    ready = turn(status=TurnStatus.READY, due_at=clock.now() + LEASE)
    stores.turns.create_turn(ready)
    claimed = ts.claim(ready, "run_live", clock.now(), clock.now() + LEASE)
    assert claimed is not None and claimed.due_at == clock.now() + LEASE
    return stores.turns.replace_turn(claimed)


def _beat(rt: Runtime, turn_id: str, clock: FakeClock) -> None:
    """The runner's heartbeat, as :meth:`loopengine.app.worker.runner.Worker.heartbeat` sends it."""
    assert rt.update_turn(turn_id, lambda t: ts.renew(t, "run_live", clock.now() + LEASE)) is not None


def _handed_on(rt: Runtime, turn_id: str) -> list[Any]:
    return [e for e in rt.stores.turns.events(turn_id) if e["type"] == "sweep_handed_on"]


@pytest.mark.parametrize("store", ["sqlite", "dynamodb"])
def test_a_renewed_turn_is_never_swept_and_its_entry_moves_once(store: str, tmp_path: Path) -> None:
    clock = FakeClock()
    with _stores(store, tmp_path, clock) as (stores, _client):
        invoker = RecordingInvoker()
        rt = _runtime(stores, invoker)
        claimed = _claimed(stores, clock)
        for _ in range(6):  # two leases' worth of heartbeats: the stored due time stays put
            clock.advance(LEASE / 3)
            _beat(rt, claimed.turn_id, clock)
        renewed = stores.turns.get_turn(claimed.turn_id)
        assert renewed is not None and claimed.due_at is not None
        assert renewed.due_at == claimed.due_at < clock.now() < renewed.lease_until

        swept = Engine(rt).sweep()

        assert (swept.recovered, invoker.invoked, _handed_on(rt, claimed.turn_id)) == (0, [], [])
        moved = stores.turns.get_turn(claimed.turn_id)
        assert moved is not None and moved.due_at == renewed.lease_until and moved.runner == "run_live"
        assert stores.turns.due_turns(clock.now()) == []  # the next sweep does not even read it
        clock.advance(LEASE / 3)
        _beat(rt, claimed.turn_id, clock)  # the runner's next write lands after the sweep's
        assert Engine(rt).sweep().recovered == 0 and invoker.invoked == []


@pytest.mark.parametrize("store", ["sqlite", "dynamodb"])
def test_a_dead_runner_is_swept_within_a_lease_and_a_sweep_interval(store: str, tmp_path: Path) -> None:
    clock = FakeClock()
    with _stores(store, tmp_path, clock) as (stores, _client):
        invoker = RecordingInvoker()
        rt = _runtime(stores, invoker)
        engine = Engine(rt)
        claimed = _claimed(stores, clock)
        clock.advance(LEASE * 0.9)
        _beat(rt, claimed.turn_id, clock)  # the last heartbeat: the runner dies right after it
        last_beat = clock.now()

        handed_on_at = None
        for _ in range(10):  # the schedule: one sweep a minute
            clock.advance(SWEEP_INTERVAL)
            engine.sweep()
            if invoker.invoked:
                handed_on_at = clock.now()
                break

        assert invoker.invoked == [claimed.turn_id]
        assert handed_on_at is not None and handed_on_at - last_beat <= LEASE + SWEEP_INTERVAL
        assert len(_handed_on(rt, claimed.turn_id)) == 1


@pytest.mark.parametrize("store", ["sqlite", "dynamodb"])
def test_a_notification_whose_writer_died_after_the_pause_is_delivered_and_unlisted(
    store: str, tmp_path: Path
) -> None:
    """The outbox record is indexed by the pause that wrote it: a crash before the writer's send
    leaves it due, the sweep sends it, and the delivered record leaves the index."""
    clock = FakeClock()
    with _stores(store, tmp_path, clock) as (stores, client):
        notifier = RecordingNotifier()
        engine = Engine(_runtime(stores, RecordingInvoker(), notifier))

        def die_after_the_pause(name: str) -> None:
            if name == "paused":
                raise Crash(name)

        with faults.inject(die_after_the_pause), pytest.raises(Crash):
            engine.send_message("shop", "refund", session_id="ses_outbox")
        assert notifier.events("approval") == []
        (parked,) = stores.turns.session_turns("ses_outbox")
        (due,) = [r for r in stores.turns.due_outbox(clock.now() + outbox.FIRST_RETRY_SECONDS)]
        assert due.event == "approval"

        clock.advance(outbox.FIRST_RETRY_SECONDS)
        assert engine.sweep().notified >= 1

        (sent,) = notifier.events("approval")
        assert sent["eventId"] == due.event_id
        assert stores.turns.due_outbox(clock.now() + 10**6) == []
        if client is not None:
            listed = client.scan(TableName=TABLE, IndexName=INDEX)["Items"]
            assert not [i for i in listed if i["sk"]["S"].startswith("OUTBOX#")]
        assert parked.turn_id == due.turn_id
