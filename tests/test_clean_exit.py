"""A process that embeds the engine exits cleanly at any moment (DESIGN.md, "Time budgets and a clean exit").

GIVEN the pattern docs/python.md teaches (SQLite, a ``ThreadInvoker``, send a message, resolve its
pending item), or the API handler driven in-process the same way, WHEN the script ends right after
the resolve, with the resume still running on the invoker's thread, THEN the interpreter exits with
status 0 every time (each ran 12 of 12 times into SIGSEGV before): nothing closes a SQLite
connection another thread is using. AND ``Engine`` is a context manager whose ``close()`` waits (a
bounded time) for the work in flight, so the resume the resolve started has finished when ``with``
ends.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from loopengine import Approval, Engine, Principal, build_engine
from loopengine.app.invokers import ThreadInvoker
from loopengine.domain.base.errors import StoreError
from loopengine.domain.turns import TurnStatus
from loopengine.stores.sqlite import SqliteDatabase

AGENT = "customer-service"
REFUND = "Order A-1001 arrived broken, please refund it."

SCRIPT = """
import sys
from loopengine import Approval, Principal, build_engine
from loopengine.app.invokers import ThreadInvoker

invoker = ThreadInvoker()
engine = build_engine({"LOOPENGINE_DB": sys.argv[1], "LOOPENGINE_MODEL": "scripted"}, invoker=invoker)
invoker.resume = engine.resume
engine.send_message("customer-service", "Order A-1001 arrived broken, please refund it.")
item = engine.open_items(agent="customer-service")[0]
engine.resolve(item["pendingId"], Approval(args_hash=item["argsHash"]), Principal("ops@example.com"))
print("resolved", flush=True)
"""
"""docs/python.md's pattern, ending right after the resolve (the resume runs on the invoker's thread)."""

HANDLER_SCRIPT = """
import json, sys
from pathlib import Path
from loopengine.http.api import handler
from loopengine.local.dev_http import LocalContext

events = Path(sys.argv[2])
sent = handler(json.loads((events / "post_message.json").read_text()), LocalContext())
pending = json.loads(sent["body"])["pendingItems"][0]["pendingId"]
text = (events / "resolve_approve.json").read_text().replace("pnd_" + "0" * 32, pending)
print("resolved" if handler(json.loads(text), LocalContext())["statusCode"] == 202 else "not resolved")
"""
"""The API handler driven in-process the same way (its engine has a ThreadInvoker), ending right there."""

EVENTS = Path(__file__).resolve().parent.parent / "events"
PARALLEL = 6


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}


@pytest.mark.slow
def test_a_script_ending_right_after_a_resolve_exits_cleanly_every_time(tmp_path: Path) -> None:
    failures: list[str] = []
    for round_, script in enumerate((SCRIPT, HANDLER_SCRIPT)):
        runs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(tmp_path / f"r{round_}-{n}.db"), str(EVENTS)],
                env={
                    **clean_env(),
                    "LOOPENGINE_DB": str(tmp_path / f"r{round_}-{n}.db"),
                    "LOOPENGINE_MODEL": "scripted",
                    "LOOPENGINE_ADMIN_AUTH": "admin:secret",
                    "POWERTOOLS_TRACE_DISABLED": "true",
                    "POWERTOOLS_METRICS_NAMESPACE": "loopengine-test",
                },
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(PARALLEL)
        ]
        for run in runs:
            out, err = run.communicate(timeout=120)
            if run.returncode != 0 or out.splitlines()[-1:] != ["resolved"] or "Traceback" in err:
                failures.append(f"exit {run.returncode}: {out[-200:]!r} {err[-600:]!r}")
    assert failures == [], f"{len(failures)} of {PARALLEL * 2} runs failed: {failures[:3]}"


def threaded_engine(db: Path) -> Engine:
    invoker = ThreadInvoker()
    engine = build_engine({"LOOPENGINE_DB": str(db), "LOOPENGINE_MODEL": "scripted"}, invoker=invoker)
    invoker.resume = engine.resume
    return engine


def test_with_engine_waits_for_the_resume_in_flight_then_closes_its_store(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    with threaded_engine(db) as engine:
        out = engine.send_message(AGENT, REFUND)
        item = engine.open_items(agent=AGENT)[0]
        engine.resolve(item["pendingId"], Approval(args_hash=item["argsHash"]), Principal("ops@example.com"))

    with pytest.raises(StoreError):  # closed: later use is refused, not a crash
        engine.turn(out.turn_id)
    engine.close()  # a second close does nothing
    with build_engine({"LOOPENGINE_DB": str(db), "LOOPENGINE_MODEL": "scripted"}) as again:
        turn = again.turn(out.turn_id)
        pending = [i["tool"] for i in again.open_items(agent=AGENT)]
    # the resume ran to its next stop before close() returned: the refund ran, the email waits
    assert (turn.status, pending) == (TurnStatus.PAUSED, ["send_email"])


def test_close_never_closes_a_connection_another_thread_is_using(tmp_path: Path) -> None:
    db = SqliteDatabase(str(tmp_path / "x.db"))
    reading, release = threading.Event(), threading.Event()

    def slow(_: object) -> int:
        reading.set()
        release.wait(30)
        return 1

    outcome: list[object] = []

    def reader() -> None:
        conn = db.connection()
        conn.create_function("slow", 1, slow)
        try:
            outcome.append(db.bodies("SELECT json_object('n', slow(1))"))
        except StoreError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    assert reading.wait(30)
    db.close()  # from another thread, while the read runs
    release.set()
    thread.join(30)
    assert outcome == [[{"n": 1}]]  # the read in flight finished on its open connection
    with pytest.raises(StoreError):
        db.bodies("SELECT body FROM turns")
    gc.collect()
    assert db._connections == {}  # the reader's thread ended: its connection was closed then


def test_a_close_during_a_write_leaves_the_write_its_connection_until_it_ends(tmp_path: Path) -> None:
    db = SqliteDatabase(str(tmp_path / "x.db"))
    with pytest.raises(StoreError, match="closed"), db.write() as conn:
        conn.execute("INSERT INTO configs (config_hash, body) VALUES ('h', '{}')")
        closer = threading.Thread(target=db.close)
        closer.start()
        closer.join(30)
        db.bodies("SELECT body FROM configs")  # a read inside the write, after the close: refused
    assert db._connections != {}  # still this thread's: the write was in progress at the close
    with pytest.raises(StoreError):
        db.bodies("SELECT body FROM configs")  # its next use closes it, on this thread
    assert db._connections == {}
    with SqliteDatabase(str(tmp_path / "x.db")) as again:
        assert again.bodies("SELECT body FROM configs") == []  # the write was rolled back
