"""The SQLite store's part of the model bill: daily usage counters and session compactions.

``usage_daily`` holds one row per (tenant, UTC day, agent), added to in the transaction of the pause
or finish that counts a turn's usage. ``compactions`` holds one row per compaction of a session; a
step reads the latest and the messages from its ``upTo`` on (:mod:`~loopengine.domain.tokens.context_window`).
"""

from __future__ import annotations

import sqlite3

from loopengine.app.ports import Compact
from loopengine.domain.base.errors import StoreError
from loopengine.domain.messages import Message
from loopengine.domain.tokens.context_window import Compaction, History
from loopengine.domain.tokens.metering import PACKED, DailyUsage, Metered, Tally
from loopengine.domain.tokens.usage import Usage
from loopengine.stores.sqlite.database import SqliteDatabase, dumps, insert


def add_tally(conn: sqlite3.Connection, tally: Tally) -> None:
    """Add ``tally`` to its (tenant, day, agent) row, creating it at zero first."""
    values = tally.metered.packed()
    row = {
        "tenant": tally.tenant,
        "day": tally.day,
        "agent": tally.agent,
        **dict(zip(PACKED, values, strict=True)),
    }
    adds = ", ".join(f"{c} = {c} + excluded.{c}" for c in PACKED)
    insert(conn, "usage_daily", row, f"ON CONFLICT (tenant, day, agent) DO UPDATE SET {adds}")


def daily_usage(db: SqliteDatabase, tenant: str, day: str, agent: str | None) -> list[DailyUsage]:
    """The rows of ``tenant`` on ``day`` (of ``agent`` alone, if given), by agent name."""
    sql = f"SELECT agent, {', '.join(PACKED)} FROM usage_daily WHERE tenant = ? AND day = ?"
    params: list[str] = [tenant, day]
    if agent is not None:
        sql += " AND agent = ?"
        params.append(agent)
    try:
        rows = db.connection().execute(sql + " ORDER BY agent", params).fetchall()
    except sqlite3.Error as exc:
        raise StoreError(f"SQLite read failed: {exc}") from exc
    return [DailyUsage(tenant, name, day, Metered(Usage(i, o, w, r), n)) for name, i, o, w, r, n in rows]


def put_compaction(conn: sqlite3.Connection, compact: Compact) -> None:
    """Store a compaction (the same ``upTo`` again replaces it: a retried write)."""
    row = {"session_id": compact.session_id, "up_to": compact.compaction.up_to}
    upsert = "ON CONFLICT (session_id, up_to) DO UPDATE SET body = excluded.body"
    insert(conn, "compactions", {**row, "body": dumps(compact.compaction.to_dict())}, upsert)


def load_since_compaction(db: SqliteDatabase, session_id: str) -> History:
    """The latest compaction, then the messages from its ``upTo`` on.

    Two reads, in that order: a compaction landing between them only means more messages are read
    (messages are never removed and a compaction only moves forward).
    """
    sql = "SELECT body FROM compactions WHERE session_id = ? ORDER BY up_to DESC LIMIT 1"
    compaction = db.record(Compaction.from_dict, sql, (session_id,))
    start = compaction.up_to if compaction else 0
    sql = "SELECT body FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq"
    messages = (Message.from_dict(found) for found in db.bodies(sql, (session_id, start)))
    return History(messages, start, compaction)


def compactions(db: SqliteDatabase, session_id: str) -> list[Compaction]:
    """Every compaction of the session, oldest first."""
    sql = "SELECT body FROM compactions WHERE session_id = ? ORDER BY up_to"
    return [Compaction.from_dict(found) for found in db.bodies(sql, (session_id,))]
