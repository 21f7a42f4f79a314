"""Races: compare-and-set loses no update, a call is claimed once, appends keep every message.

The thread tests run against every adapter. The SQLite adapter additionally promises the same
across processes sharing one database file, which the last tests check with spawned workers.
"""

from __future__ import annotations

import dataclasses
import gc
import multiprocessing
import sqlite3
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from loopengine.app.ports import Append, Change, CheckpointStore, SessionStore, Stores
from loopengine.domain import checkpoint as transitions
from loopengine.domain import outbox
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import ConfigError, StoreError, VersionConflict
from loopengine.domain.base.ids import new_id
from loopengine.domain.decisions import Abandoned, DecidedBy
from loopengine.domain.messages import Message
from loopengine.stores.sqlite import (
    SqliteCheckpointStore,
    SqliteDatabase,
    open_sqlite_stores,
    sqlite_stores,
)
from tests.contract import T0, call, checkpoint, item, turn

THREADS = 8
ROUNDS = 4
T = TypeVar("T")


def race(n: int, work: Callable[[int], T]) -> list[T]:
    """Run ``work(0..n-1)`` on n threads released together; re-raise any thread's error."""
    start = threading.Barrier(n)

    def go(index: int) -> T:
        start.wait(timeout=30)
        return work(index)

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(go, range(n)))


def _mark(mark: str) -> Abandoned:
    """A decision record whose decider is the mark: the counter this test increments."""
    return Abandoned(pending_id="pnd_mark", tool="mark", at=0.0, decided_by=mark)


def increment(store: CheckpointStore, checkpoint_id: str, mark: str) -> None:
    """Add ``mark`` to the checkpoint's decisions: read, change, compare-and-set, retry on loss."""
    current = store.get(checkpoint_id)
    while True:
        assert current is not None
        try:
            store.replace(dataclasses.replace(current, decisions=(*current.decisions, _mark(mark))))
            return
        except VersionConflict as lost:
            current = lost.current


def append_one(sessions: SessionStore, session_id: str, message: Message) -> None:
    """Append ``message`` at whatever the end of the history is now, retrying on conflict."""
    expected = len(sessions.load(session_id))
    while True:
        try:
            sessions.append(session_id, [message], expected_len=expected)
            return
        except VersionConflict as lost:
            expected = lost.current


def test_concurrent_increments_are_never_lost(stores: Stores) -> None:
    cp = checkpoint()
    stores.checkpoints.create(cp)

    def work(worker: int) -> None:
        for n in range(ROUNDS):
            increment(stores.checkpoints, cp.id, f"{worker}.{n}")

    race(THREADS, work)

    final = stores.checkpoints.get(cp.id)
    assert final is not None
    assert final.version == THREADS * ROUNDS
    marks = [d.decided_by for d in final.decisions]
    assert sorted(marks) == sorted(f"{w}.{n}" for w in range(THREADS) for n in range(ROUNDS))


def test_racing_approvals_of_one_item_have_exactly_one_winner(stores: Stores) -> None:
    pending = item()
    cp = checkpoint(pending, item())
    stores.checkpoints.create(cp)

    def click(worker: int) -> bool:
        who = DecidedBy(f"user{worker}")
        change = transitions.approve(cp, pending, pending.args, who, T0, edited=False)
        try:
            stores.checkpoints.replace(change)
        except VersionConflict:
            return False
        return True

    assert sorted(race(THREADS, click)) == [False] * (THREADS - 1) + [True]
    final = stores.checkpoints.get(cp.id)
    assert final is not None
    assert final.version == 1
    assert list(final.approved) == [pending.pending_id]


def test_racing_start_call_claims_the_call_exactly_once(stores: Stores) -> None:
    claimed = call(new_id("turn_"))

    results = race(THREADS, lambda w: stores.turns.start_call(claimed))

    assert sorted(results) == [False] * (THREADS - 1) + [True]
    assert stores.turns.calls(claimed.turn_id) == {claimed.tool_use_id: claimed}


def test_racing_turn_replacements_have_exactly_one_winner(stores: Stores) -> None:
    record = turn()
    stores.turns.create_turn(record)

    def lease(worker: int) -> float | None:
        try:
            stored = stores.turns.replace_turn(dataclasses.replace(record, lease_until=worker))
        except VersionConflict:
            return None
        return stored.lease_until

    winners = [w for w in race(THREADS, lease) if w is not None]
    assert len(winners) == 1
    final = stores.turns.get_turn(record.turn_id)
    assert final is not None
    assert (final.version, final.lease_until) == (1, winners[0])


def test_racing_commits_of_one_checkpoint_land_one_whole_change(stores: Stores) -> None:
    """How deciders race in production: each commits its decision, audit event and notification."""
    running = turn()
    pending = item()
    cp = checkpoint(pending, item(), turn_id=running.turn_id)
    stores.turns.commit(Change(running.turn_id, new_turn=running, new_checkpoint=cp))

    def click(worker: int) -> bool:
        decided = transitions.approve(cp, pending, pending.args, DecidedBy(f"user{worker}"), T0, edited=False)
        event = {"type": "decided", "at": T0, "worker": worker}
        note = outbox.new_record(f"evt_{worker}", running.turn_id, "customer-service", "h1", "x", {}, T0)
        try:
            stores.turns.commit(Change(running.turn_id, checkpoint=decided, events=(event,), outbox=(note,)))
        except VersionConflict as lost:
            assert lost.current is not None and lost.current.version == 1
            return False
        return True

    results = race(THREADS, click)

    assert sorted(results) == [False] * (THREADS - 1) + [True]
    winner = results.index(True)
    final = stores.checkpoints.get(cp.id)
    assert final is not None
    assert (final.version, [d.decided_by for d in final.decisions]) == (1, [f"user{winner}"])
    assert stores.turns.events(running.turn_id) == [{"type": "decided", "at": T0, "worker": winner}]
    assert [r.event_id for r in stores.turns.due_outbox(T0 + 3600)] == [f"evt_{winner}"]


def test_racing_first_messages_of_one_session_start_one_turn(stores: Stores) -> None:
    """A new turn and its message commit together: of racing first messages exactly one lands."""
    session = new_id("s_")
    turns = [turn(session_id=session) for _ in range(THREADS)]

    def send(worker: int) -> bool:
        first = turns[worker]
        message = Message.user_text(f"{worker}")
        try:
            add = Append(first.session_key, (message,), 0)
            stores.turns.commit(Change(first.turn_id, new_turn=first, append=add))
        except VersionConflict as lost:
            assert lost.current == 1
            return False
        return True

    results = race(THREADS, send)

    assert sorted(results) == [False] * (THREADS - 1) + [True]
    winner = results.index(True)
    assert [m.text for m in stores.sessions.load(turns[0].session_key)] == [f"{winner}"]
    assert stores.turns.session_turns(turns[0].session_key) == [turns[winner]]
    assert [stores.turns.get_turn(t.turn_id) for t in turns].count(None) == THREADS - 1


def test_concurrent_appends_keep_every_message_once_in_one_order(stores: Stores) -> None:
    session = new_id("s_")

    def work(worker: int) -> None:
        for n in range(ROUNDS):
            append_one(stores.sessions, session, Message.user_text(f"{worker}.{n}"))

    race(THREADS, work)

    texts = [m.text for m in stores.sessions.load(session)]
    assert sorted(texts) == sorted(f"{w}.{n}" for w in range(THREADS) for n in range(ROUNDS))
    for worker in range(THREADS):
        own = [t for t in texts if t.startswith(f"{worker}.")]
        assert own == [f"{worker}.{n}" for n in range(ROUNDS)]
    assert [m.text for m in stores.sessions.load(session)] == texts


# --- SQLite only: several processes on one database file -------------------------------------

PROCESSES = 3


def sqlite_worker(
    path: str, worker: int, ids: dict[str, str], start: Any, results: Any
) -> None:  # pragma: no cover - runs in a spawned process
    """One process's share of the race; reports ``("ok", claimed)`` or ``("error", text)``."""
    try:
        with SqliteDatabase(path) as db:
            stores = sqlite_stores(db, FakeClock())
            start.wait(timeout=60)
            claimed = stores.turns.start_call(call(ids["turn"], ids["call"]))
            for n in range(ROUNDS):
                increment(stores.checkpoints, ids["checkpoint"], f"{worker}.{n}")
                append_one(stores.sessions, ids["session"], Message.user_text(f"{worker}.{n}"))
        results.put(("ok", claimed))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def test_processes_sharing_a_file_lose_nothing_and_claim_once(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    cp = checkpoint()
    ids = {"checkpoint": cp.id, "session": new_id("s_"), "turn": new_id("turn_"), "call": "toolu_1"}
    with SqliteDatabase(path) as db:
        sqlite_stores(db, FakeClock()).checkpoints.create(cp)
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(PROCESSES), ctx.Queue()
    workers = [
        ctx.Process(target=sqlite_worker, args=(path, w, ids, start, results)) for w in range(PROCESSES)
    ]
    for process in workers:
        process.start()
    try:
        reports = [results.get(timeout=120) for _ in workers]
    finally:
        for process in workers:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
        results.close()
        results.join_thread()

    assert [r for r in reports if r[0] == "error"] == []
    assert sorted(claimed for _, claimed in reports) == [False] * (PROCESSES - 1) + [True]
    with SqliteDatabase(path) as db:
        stores = sqlite_stores(db, FakeClock())
        final = stores.checkpoints.get(cp.id)
        texts = [m.text for m in stores.sessions.load(ids["session"])]
        calls = stores.turns.calls(ids["turn"])
    expected = sorted(f"{w}.{n}" for w in range(PROCESSES) for n in range(ROUNDS))
    assert final is not None
    assert final.version == PROCESSES * ROUNDS
    assert sorted(d.decided_by for d in final.decisions) == expected
    assert sorted(texts) == expected
    assert list(calls) == ["toolu_1"]


def test_open_sqlite_stores_creates_the_directory_and_shares_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "a" / "b" / "loopengine.db")
    one, two = open_sqlite_stores(path, FakeClock()), open_sqlite_stores(path, FakeClock())
    try:
        cp = checkpoint()
        one.checkpoints.create(cp)
        assert two.checkpoints.get(cp.id) == cp
    finally:
        for opened in (one, two):
            assert isinstance(opened.checkpoints, SqliteCheckpointStore)
            opened.checkpoints.db.close()


def test_a_closed_database_refuses_further_use(tmp_path: Path) -> None:
    db = SqliteDatabase(str(tmp_path / "x.db"))
    db.close()

    with pytest.raises(StoreError):
        sqlite_stores(db, FakeClock()).checkpoints.get("cp")


def test_an_in_memory_database_is_refused() -> None:
    with pytest.raises(ConfigError):
        SqliteDatabase(":memory:")


def test_sqlite_failures_surface_as_store_errors(tmp_path: Path) -> None:
    garbage = tmp_path / "not-a-database.db"
    garbage.write_bytes(b"this is not sqlite " * 100)

    with pytest.raises(StoreError) as failed:
        SqliteDatabase(str(garbage))

    assert isinstance(failed.value.__cause__, sqlite3.Error)


def test_a_finished_thread_gives_its_connection_back(tmp_path: Path) -> None:
    with SqliteDatabase(str(tmp_path / "threads.db")) as db:
        stores = sqlite_stores(db, FakeClock())
        for _ in range(20):
            worker = threading.Thread(target=stores.turns.put_config, args=("h", {"n": 1}))
            worker.start()
            worker.join()
        gc.collect()

        assert len(db._connections) <= 2  # this thread's, plus at most one not yet collected
        assert stores.turns.get_config("h") == {"n": 1}
