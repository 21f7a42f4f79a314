"""Embedded SQLite adapter for the three store ports, on a :class:`SqliteDatabase`.

The database (file, schema, a connection per thread, ``BEGIN IMMEDIATE`` writes) is
:mod:`loopengine.stores.sqlite.database`. ``due_turns`` lists the turns that are due for the sweep by
``due_at``, kept in step with ``turns`` in the same transaction; ``outbox`` holds notifications,
indexed by due time while undelivered. :meth:`SqliteTurnStore.commit` writes a whole state
transition (turn, checkpoint, events, outbox) in one transaction. A session is one row per message,
so an append never rewrites history; a tool call's row is its claim that it runs at most once.
"""

from __future__ import annotations

import dataclasses

from loopengine.app.ports import Change, Committed, Stores
from loopengine.domain.base.clock import Clock
from loopengine.domain.base.errors import AlreadyExists
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.idempotency import IdempotencyRecord
from loopengine.domain.messages import Message
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.tokens.context_window import Compaction, History
from loopengine.domain.tokens.metering import DailyUsage
from loopengine.domain.turns import CallRecord, TurnQuery, TurnRecord, TurnStatus
from loopengine.stores.sqlite import bill as bill
from loopengine.stores.sqlite.database import SqliteDatabase, dumps, insert, loads
from loopengine.stores.sqlite.rows import (
    _append,
    _call_row,
    _claim_key,
    _create_checkpoint,
    _create_turn,
    _put_outbox,
    _replace_checkpoint,
    _replace_turn,
)

_TURN = "SELECT body FROM turns WHERE turn_id = ?"


class _SqliteStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db


class SqliteCheckpointStore(_SqliteStore):
    """CheckpointStore on SQLite: a checkpoint row plus one pointer row per pendingId."""

    def create(self, cp: TurnCheckpoint) -> None:
        """Write the checkpoint and its pointers in one transaction; AlreadyExists if taken."""
        with self.db.write() as conn:
            _create_checkpoint(conn, cp)

    def get(self, checkpoint_id: str) -> TurnCheckpoint | None:
        """Read by checkpoint id."""
        sql = "SELECT body FROM checkpoints WHERE id = ?"
        return self.db.record(TurnCheckpoint.from_dict, sql, (checkpoint_id,))

    def find_by_pending(self, pending_id: str) -> TurnCheckpoint | None:
        """Follow a pendingId's pointer (closed checkpoints included)."""
        sql = (
            "SELECT c.body FROM pending_pointers p JOIN checkpoints c ON c.id = p.checkpoint_id"
            " WHERE p.pending_id = ?"
        )
        return self.db.record(TurnCheckpoint.from_dict, sql, (pending_id,))

    def find_with_turn(self, pending_id: str) -> tuple[TurnCheckpoint, TurnRecord | None] | None:
        """The pointer's checkpoint, then its turn (two local reads; the write after is a CAS anyway)."""
        cp = self.find_by_pending(pending_id)
        if cp is None:
            return None
        return cp, self.db.record(TurnRecord.from_dict, _TURN, (cp.turn_id,))

    def replace(self, cp: TurnCheckpoint) -> TurnCheckpoint:
        """Compare-and-set on ``cp.version``; VersionConflict carries the stored record or None."""
        with self.db.write() as conn:
            return _replace_checkpoint(conn, cp)

    def get_with_config(
        self, checkpoint_id: str, config_hash: str | None
    ) -> tuple[TurnCheckpoint | None, JsonDict | None]:
        """The checkpoint, and the config snapshot if asked (two local reads)."""
        sql = "SELECT body FROM configs WHERE config_hash = ?"
        return self.get(checkpoint_id), None if config_hash is None else self.db.body(sql, (config_hash,))

    def list_open(self, tenant: str, agent: str | None = None) -> list[TurnCheckpoint]:
        """Checkpoints of ``tenant`` not yet closed, oldest first, optionally for one agent."""
        sql = "SELECT body FROM checkpoints WHERE closed = 0 AND tenant = ?"
        params: list[str] = [tenant]
        if agent is not None:
            sql += " AND agent = ?"
            params.append(agent)
        rows = self.db.bodies(sql + " ORDER BY created_at, rowid", params)
        return [TurnCheckpoint.from_dict(found) for found in rows]


class SqliteSessionStore(_SqliteStore):
    """SessionStore on SQLite: one row per message, keyed (session_id, seq)."""

    def load(self, session_id: str) -> list[Message]:
        """The whole history in order; empty for an unknown session."""
        sql = "SELECT body FROM messages WHERE session_id = ? ORDER BY seq"
        return [Message.from_dict(found) for found in self.db.bodies(sql, (session_id,))]

    def append(self, session_id: str, messages: list[Message], expected_len: int) -> None:
        """Append iff the history has ``expected_len`` messages; VersionConflict(current=length)."""
        with self.db.write() as conn:
            _append(conn, session_id, messages, expected_len)

    def load_since_compaction(self, session_id: str) -> History:
        """The history from its latest compaction on (see :mod:`~loopengine.stores.sqlite.bill`)."""
        return bill.load_since_compaction(self.db, session_id)

    def compactions(self, session_id: str) -> list[Compaction]:
        """Every compaction of the session, oldest first."""
        return bill.compactions(self.db, session_id)


class SqliteTurnStore(_SqliteStore):
    """TurnStore on SQLite: turns, their audit events, tool-call claims and config snapshots."""

    def commit(self, change: Change) -> Committed:
        """Write a whole transition in one transaction (see :class:`~loopengine.app.ports.Change`)."""
        turn: TurnRecord | None = None
        cp: TurnCheckpoint | None = None
        with self.db.write() as conn:
            if change.new_turn is not None:
                _create_turn(conn, turn := change.new_turn)
            if change.turn is not None:
                turn = _replace_turn(conn, change.turn)
            if change.new_checkpoint is not None:
                _create_checkpoint(conn, cp := change.new_checkpoint)
            if change.checkpoint is not None:
                cp = _replace_checkpoint(conn, change.checkpoint)
            if change.append is not None:
                add = change.append
                _append(conn, add.session_id, add.messages, add.expected_len)
            for event in change.events:
                insert(conn, "turn_events", {"turn_id": change.turn_id, "body": dumps(event)})
            for record in change.outbox:
                _put_outbox(conn, record)
            if change.idempotency is not None:
                _claim_key(conn, change.idempotency)
            for call in change.claims:
                if insert(conn, "tool_calls", _call_row(call), _ON_CALL_CONFLICT + "NOTHING") != 1:
                    raise AlreadyExists(f"call {call.tool_use_id} of turn {call.turn_id} was claimed already")
            for call in change.calls_to_store():
                insert(
                    conn, "tool_calls", _call_row(call), _ON_CALL_CONFLICT + "UPDATE SET body = excluded.body"
                )
            if change.config is not None:
                row = {"config_hash": change.config[0], "body": dumps(change.config[1])}
                insert(conn, "configs", row, "ON CONFLICT (config_hash) DO NOTHING")
            if change.compact is not None:
                bill.put_compaction(conn, change.compact)
            if change.tally is not None:
                bill.add_tally(conn, change.tally)
        return Committed(turn, cp)

    def hold_wait(self, holder: str, limit: int, now: float, until: float) -> int | None:
        """Take the lowest free long-poll slot of ``holder`` (expired ones are free), in one transaction."""
        with self.db.write() as conn:
            held = {
                row[0]
                for row in conn.execute(
                    "SELECT slot FROM wait_slots WHERE holder = ? AND until > ?", (holder, now)
                )
            }
            free = next((slot for slot in range(limit) if slot not in held), None)
            if free is not None:
                conn.execute(
                    "INSERT OR REPLACE INTO wait_slots (holder, slot, until) VALUES (?, ?, ?)",
                    (holder, free, until),
                )
            return free

    def release_wait(self, holder: str, slot: int) -> None:
        """Give a slot back."""
        with self.db.write() as conn:
            conn.execute("DELETE FROM wait_slots WHERE holder = ? AND slot = ?", (holder, slot))

    def get_idempotency(self, key: str) -> IdempotencyRecord | None:
        """The record of a scoped idempotency key."""
        sql = "SELECT body FROM idempotency_keys WHERE key = ?"
        return self.db.record(IdempotencyRecord.from_dict, sql, (key,))

    def create_turn(self, turn: TurnRecord) -> None:
        """Store a new turn; AlreadyExists if its id is taken."""
        with self.db.write() as conn:
            _create_turn(conn, turn)

    def get_turn(self, turn_id: str) -> TurnRecord | None:
        """Read a turn."""
        return self.db.record(TurnRecord.from_dict, _TURN, (turn_id,))

    def replace_turn(self, turn: TurnRecord) -> TurnRecord:
        """Compare-and-set on ``turn.version``; VersionConflict carries the stored record."""
        with self.db.write() as conn:
            return _replace_turn(conn, turn)

    def session_turns(self, session_id: str) -> list[TurnRecord]:
        """Every turn of a session, oldest first."""
        sql = "SELECT body FROM turns WHERE session_id = ? ORDER BY created_at, rowid"
        return [TurnRecord.from_dict(found) for found in self.db.bodies(sql, (session_id,))]

    def session_owner(self, session_id: str) -> tuple[str, str] | None:
        """(tenant, agent) of the session's first turn."""
        sql = "SELECT body FROM turns WHERE session_id = ? ORDER BY created_at, rowid LIMIT 1"
        found = self.db.body(sql, (session_id,))
        return None if found is None else (str(found.get("tenant", "")), str(found["agent"]))

    def unfinished_session_turns(self, session_id: str) -> list[TurnRecord]:
        """The session's turns that have not finished, oldest first."""
        return [t for t in self.session_turns(session_id) if t.status is not TurnStatus.FINISHED]

    def due_turns(self, now: float, limit: int = 100) -> list[TurnRecord]:
        """Turns due at or before ``now``, earliest first (ties by turn id)."""
        sql = (
            "SELECT t.body FROM due_turns d JOIN turns t ON t.turn_id = d.turn_id"
            " WHERE d.due_at <= ? ORDER BY d.due_at, d.turn_id LIMIT ?"
        )
        return [TurnRecord.from_dict(found) for found in self.db.bodies(sql, (now, limit))]

    def due_outbox(self, now: float, limit: int = 100) -> list[OutboxRecord]:
        """Undelivered notifications due at or before ``now``, earliest first."""
        sql = (
            "SELECT body FROM outbox WHERE due_at IS NOT NULL AND due_at <= ?"
            " ORDER BY due_at, event_id LIMIT ?"
        )
        return [OutboxRecord.from_dict(found) for found in self.db.bodies(sql, (now, limit))]

    def list_turns(self, query: TurnQuery) -> list[TurnRecord]:
        """The matching turns, newest first: one read over the ``turns`` table (JSON1 on the body)."""
        fields: dict[str, str | None] = {"status": query.status, "stopReason": query.stop_reason}
        fields |= {"agent": query.agent, "tenant": query.tenant}
        wanted = {name: value for name, value in fields.items() if value is not None}
        where = ["created_at >= ?"] + [f"json_extract(body, '$.{name}') = ?" for name in wanted]
        sql = (
            f"SELECT body FROM turns WHERE {' AND '.join(where)} ORDER BY created_at DESC, rowid DESC LIMIT ?"
        )
        rows = self.db.bodies(sql, (query.since or 0.0, *wanted.values(), query.limit))
        return [TurnRecord.from_dict(found) for found in rows]

    def put_outbox(self, record: OutboxRecord, events: tuple[JsonDict, ...] = ()) -> None:
        """Store a notification's delivery state, and ``events`` in the same transaction."""
        with self.db.write() as conn:
            _put_outbox(conn, record)
            for event in events:
                insert(conn, "turn_events", {"turn_id": record.turn_id, "body": dumps(event)})

    def add_event(self, turn_id: str, event: JsonDict) -> None:
        """Append one audit event."""
        with self.db.write() as conn:
            insert(conn, "turn_events", {"turn_id": turn_id, "body": dumps(event)})

    def events(self, turn_id: str) -> list[JsonDict]:
        """The turn's audit events in the order they were added."""
        sql = "SELECT body FROM turn_events WHERE turn_id = ? ORDER BY seq"
        return self.db.bodies(sql, (turn_id,))

    def start_call(self, call: CallRecord) -> bool:
        """Claim a call: True if this caller inserted the row, False if it was already there."""
        with self.db.write() as conn:
            inserted = insert(conn, "tool_calls", _call_row(call), _ON_CALL_CONFLICT + "NOTHING")
        return inserted == 1

    def finish_call(self, call: CallRecord) -> None:
        """Record the outcome, result and finish time of a started call.

        The started row keeps its ``tool`` and ``startedAt``; a call that was never started is
        recorded as given rather than lost.
        """
        sql = "SELECT body FROM tool_calls WHERE turn_id = ? AND tool_use_id = ?"
        with self.db.write() as conn:
            found = conn.execute(sql, (call.turn_id, call.tool_use_id)).fetchone()
            merged = call
            if found is not None:
                started = CallRecord.from_dict(loads(found[0]))
                merged = dataclasses.replace(
                    started, outcome=call.outcome, result=call.result, finished_at=call.finished_at
                )
            upsert = _ON_CALL_CONFLICT + "UPDATE SET body = excluded.body"
            insert(conn, "tool_calls", _call_row(merged), upsert)

    def calls(self, turn_id: str) -> dict[str, CallRecord]:
        """The turn's call records by toolUseId, in the order they were started."""
        sql = "SELECT body FROM tool_calls WHERE turn_id = ? ORDER BY rowid"
        records = [CallRecord.from_dict(found) for found in self.db.bodies(sql, (turn_id,))]
        return {record.tool_use_id: record for record in records}

    def daily_usage(self, tenant: str, day: str, agent: str | None = None) -> list[DailyUsage]:
        """What ``tenant``'s agents used on ``day`` (one row per agent)."""
        return bill.daily_usage(self.db, tenant, day, agent)

    def put_config(self, config_hash: str, snapshot: JsonDict) -> None:
        """Store a snapshot under its hash; a second put of the same hash changes nothing."""
        row = {"config_hash": config_hash, "body": dumps(snapshot)}
        with self.db.write() as conn:
            insert(conn, "configs", row, "ON CONFLICT (config_hash) DO NOTHING")

    def get_config(self, config_hash: str) -> JsonDict | None:
        """Read a snapshot, or None."""
        return self.db.body("SELECT body FROM configs WHERE config_hash = ?", (config_hash,))


_ON_CALL_CONFLICT = "ON CONFLICT (turn_id, tool_use_id) DO "


def sqlite_stores(db: SqliteDatabase, clock: Clock) -> Stores:
    """The three stores on an open database; the caller owns ``db`` and closes it."""
    return Stores(SqliteCheckpointStore(db), SqliteSessionStore(db), SqliteTurnStore(db), clock, db.close)


def open_sqlite_stores(path: str, clock: Clock) -> Stores:
    """Open (creating if needed) the database at ``path`` and return the stores on it.

    The database stays open until ``stores.close()``.
    """
    return sqlite_stores(SqliteDatabase(path), clock)
