"""Embedding loopengine in an application: docs/python.md, runnable offline.

    python examples/embed.py [AGENT MESSAGE]

It builds the engine from settings (the offline scripted model, SQLite in a temporary directory), sends
the bundled customer-service agent a message, follows the turn's events as they happen (the model's
text piece by piece), lists the pending items and approves them, then plugs in a store of its own (a
turn store that keeps a copy of every audit event it writes). tests/test_python_api.py runs it.

Given an agent and a message it does the same with that agent (one ``LOOPENGINE_AGENTS_PATH`` finds),
its settings then taken from the process environment (the agents path, the secrets its tools and MCP
servers read) with the store and the model as above; docs/walkthrough.md runs it so.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loopengine import Engine, Principal, build_engine
from loopengine.app.invokers import ThreadInvoker
from loopengine.app.ports import Change, Committed, Stores
from loopengine.domain.base.clock import SystemClock
from loopengine.domain.decisions import Approval
from loopengine.stores.sqlite import (
    SqliteCheckpointStore,
    SqliteDatabase,
    SqliteSessionStore,
    SqliteTurnStore,
)

AGENT = "customer-service"
REVIEWER = Principal("ops@example.com")  # who decides: recorded as decidedBy "user:ops@example.com"


def show(events: Iterator[dict[str, Any]]) -> int:
    """Print a turn's events as they come (model text as it streams); the last ``seq`` seen."""
    cursor, pieces = 0, 0
    for event in events:
        cursor = event.get("seq", cursor)
        if event["type"] == "text:delta":  # a piece of the model's text; "live" ones are not stored
            print(event["text"] if pieces else f"  agent: {event['text']}", end="", flush=True)
            pieces += 1
            continue
        if pieces:
            print(f"  ({pieces} pieces)")
            pieces = 0
        if event["type"] in ("tool_outcome", "approval:pending", "question:pending", "finished"):
            detail = event.get("tool") or event.get("stopReason")
            print(f"  [{event['seq']}] {event['type']}: {detail}")
    return cursor


def follow_and_approve(engine: Engine, agent: str, message: str) -> str:
    """Send a message, follow its turn, approve what it asks for until it finishes; its turn id."""
    out = engine.send_message(agent, message, budget_seconds=0)
    print(f"sent: turn {out.turn_id} is {out.status.public()}")  # answered at once: a worker runs it
    cursor = show(engine.follow(out.turn_id, until_pause=True))
    while items := engine.open_items(agent=agent):  # what GET /pending-approvals lists
        item = items[0]
        print(f"pending: {item['tool']} {item['args']} ({item['reason']})")
        done = engine.resolve(item["pendingId"], Approval(args_hash=item["argsHash"]), REVIEWER)
        print(f"approved {item['tool']}: {done.outstanding} outstanding")
        cursor = show(engine.follow(out.turn_id, after=cursor, until_pause=True))
    print(f"finished: {engine.outcome(out.turn_id).text}")
    return out.turn_id


class CopyingTurns(SqliteTurnStore):
    """The SQLite turn store that also keeps a copy of every audit event it writes (a log, a metric...)."""

    def __init__(self, db: SqliteDatabase) -> None:
        super().__init__(db)
        self.copied: list[dict[str, Any]] = []

    def commit(self, change: Change) -> Committed:
        committed = super().commit(change)  # the events ride in the same atomic write as the state
        self.copied.extend(change.events)
        return committed

    def add_event(self, turn_id: str, event: dict[str, Any]) -> None:
        super().add_event(turn_id, event)
        self.copied.append(event)


def plugged_in(path: Path, settings: dict[str, str], agent: str) -> None:
    """An engine on a Stores bundle of one's own: here SQLite with a turn store that copies events."""
    db = SqliteDatabase(str(path))
    turns = CopyingTurns(db)
    stores = Stores(SqliteCheckpointStore(db), SqliteSessionStore(db), turns, SystemClock(), db.close)
    engine = build_engine(settings, stores=stores)
    try:
        out = engine.send_message(agent, "Where is order A-1002?")  # allowed calls only: no pause
        kinds = ", ".join(dict.fromkeys(e["type"] for e in turns.copied))
        print(f"plugged store: turn {out.status.public()}; copied {len(turns.copied)} events: {kinds}")
    finally:
        stores.close()


def main(argv: list[str]) -> int:
    agent, message = (argv[1], argv[2]) if len(argv) == 3 else (AGENT, "Order A-1001 arrived broken.")
    with tempfile.TemporaryDirectory() as tmp:
        settings = {"LOOPENGINE_DB": str(Path(tmp) / "loopengine.db"), "LOOPENGINE_MODEL": "scripted"}
        if len(argv) == 3:  # another agent: where it is and what it reads come from the environment
            settings = {**{k: v for k, v in os.environ.items() if k != "LOOPENGINE_TABLE"}, **settings}
        invoker = ThreadInvoker()  # resumes run on a background thread, as a server would
        engine = build_engine(settings, invoker=invoker)
        invoker.resume = engine.resume
        try:
            follow_and_approve(engine, agent, message)
        finally:
            invoker.join()
            engine.rt.stores.close()
        plugged_in(Path(tmp) / "plugged.db", settings, agent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
