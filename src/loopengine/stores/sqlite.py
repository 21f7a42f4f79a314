"""Embedded SQLite adapter for the three store ports (standard library ``sqlite3`` only).

One database file in WAL mode, one connection per thread. Every write runs inside
``BEGIN IMMEDIATE``, which takes the database's write lock before the first read, so a
read-modify-write (the compare-and-set behind ``replace``, the length check behind ``append``) is
atomic across threads *and* processes on one machine; a writer that finds the lock taken waits up to
the busy timeout, then fails with :class:`~loopengine.domain.errors.StoreError`.

Records are stored as their JSON ``to_dict`` form in ``body``; the columns beside it (see
``_SCHEMA``) exist only to filter, order or compare; ``due_turns`` lists the turns that are due
for the sweep by ``due_at``, kept in step with ``turns`` in the same transaction (a table of its
own, so a database made before it existed keeps working); ``outbox`` holds notifications, indexed
by due time while undelivered. :meth:`SqliteTurnStore.commit` writes a whole state transition
(turn, checkpoint, events, outbox) in one transaction. A session is one row per message, so an append
never rewrites history; a tool call's row is its claim that it runs at most once.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from loopengine.app.ports import Change, Committed, JsonDict, Stores
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.clock import Clock
from loopengine.domain.errors import AlreadyExists, ConfigError, StoreError, VersionConflict
from loopengine.domain.messages import Message
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.turns import CallRecord, TurnRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (id TEXT PRIMARY KEY, agent TEXT NOT NULL,
    tenant TEXT NOT NULL, closed INTEGER NOT NULL, created_at REAL NOT NULL,
    version INTEGER NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS checkpoints_open ON checkpoints (created_at) WHERE closed = 0;
CREATE TABLE IF NOT EXISTS pending_pointers (pending_id TEXT PRIMARY KEY,
    checkpoint_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
    body TEXT NOT NULL, PRIMARY KEY (session_id, seq));
CREATE TABLE IF NOT EXISTS turns (turn_id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
    created_at REAL NOT NULL, version INTEGER NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns (session_id, created_at);
CREATE TABLE IF NOT EXISTS due_turns (turn_id TEXT PRIMARY KEY, due_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS due_turns_by_time ON due_turns (due_at, turn_id);
CREATE TABLE IF NOT EXISTS outbox (event_id TEXT PRIMARY KEY, turn_id TEXT NOT NULL,
    due_at REAL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (due_at, event_id) WHERE due_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS turn_events (seq INTEGER PRIMARY KEY AUTOINCREMENT,
    turn_id TEXT NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS turn_events_by_turn ON turn_events (turn_id, seq);
CREATE TABLE IF NOT EXISTS tool_calls (turn_id TEXT NOT NULL, tool_use_id TEXT NOT NULL,
    body TEXT NOT NULL, PRIMARY KEY (turn_id, tool_use_id));
CREATE TABLE IF NOT EXISTS configs (config_hash TEXT PRIMARY KEY, body TEXT NOT NULL)
"""


def _dumps(data: JsonDict) -> str:
    # ensure_ascii keeps any str (even a lone surrogate) encodable as UTF-8 for SQLite.
    return json.dumps(data, separators=(",", ":"))


def _loads(body: str) -> JsonDict:
    data = json.loads(body)
    assert isinstance(data, dict)
    return data


def _insert(conn: sqlite3.Connection, table: str, row: dict[str, Any], tail: str = "") -> int:
    """INSERT one row given as column -> value (names are internal constants); return rowcount."""
    sql = f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))}) {tail}"
    return conn.execute(sql, tuple(row.values())).rowcount


def _compare_and_set(
    conn: sqlite3.Connection,
    table: str,
    key: str,
    row: dict[str, Any],
    expected: int,
    parse: Callable[[JsonDict], object],
) -> None:
    """Write ``row`` iff the stored version is ``expected``, else VersionConflict(current)."""
    sets = ", ".join(f"{column} = ?" for column in row)
    sql = f"UPDATE {table} SET {sets} WHERE {key} = ? AND version = ?"
    if conn.execute(sql, (*row.values(), row[key], expected)).rowcount == 1:
        return
    found = conn.execute(f"SELECT body FROM {table} WHERE {key} = ?", (row[key],)).fetchone()
    current = parse(_loads(found[0])) if found else None
    raise VersionConflict(f"{table} {row[key]} is not at version {expected}", current=current)


def _close_all(connections: set[sqlite3.Connection]) -> None:
    for conn in list(connections):
        _release(conn, connections)


def _release(conn: sqlite3.Connection, connections: set[sqlite3.Connection]) -> None:
    connections.discard(conn)
    with suppress(sqlite3.Error):
        conn.close()


class _ThreadConnection:
    """Held in one thread's local storage: when the thread ends it is dropped, closing ``conn``."""

    __slots__ = ("__weakref__", "conn")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn


class SqliteDatabase:
    """One SQLite file shared by the stores: a connection per thread, writes under a lock.

    The parent directory is created if missing. ``":memory:"`` and ``""`` are refused: every
    connection (so every thread) would get its own private database. Call :meth:`close` (or use
    ``with``) to close every connection opened through this object; anything left open is closed
    when the object is garbage-collected.
    """

    def __init__(self, path: str, busy_timeout: float = 10.0) -> None:
        if path in ("", ":memory:"):
            raise ConfigError("the SQLite store needs a file path, not a private temporary database")
        self.path = path
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: set[sqlite3.Connection] = set()
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_all, self._connections)
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the directory for {path}") from exc
        with self.write() as conn:
            for statement in _SCHEMA.split(";"):
                conn.execute(statement)

    def connection(self) -> sqlite3.Connection:
        """Return this thread's connection, opened on first use and closed when the thread ends."""
        held: _ThreadConnection | None = getattr(self._local, "held", None)
        if self._closed:
            raise StoreError(f"the SQLite database {self.path} is closed")
        if held is None:
            held = _ThreadConnection(self._connect())
            weakref.finalize(held, _release, held.conn, self._connections)
            self._local.held = held
        return held.conn

    def _connect(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise StoreError(f"the SQLite database {self.path} is closed")
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self._busy_timeout,
                    isolation_level=None,
                    check_same_thread=False,  # only so close() may run on another thread
                )
                self._connections.add(conn)
                conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
                conn.execute("PRAGMA journal_mode = WAL")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open the SQLite database {self.path}") from exc
            return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed on success, else rolled back.

        Domain errors raised inside pass through unchanged; sqlite errors become ``StoreError``.
        """
        conn = self.connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError("could not start a write transaction") from exc
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"SQLite write failed: {exc}") from exc
            raise

    def bodies(self, sql: str, params: Sequence[Any] = ()) -> list[JsonDict]:
        """Run one read (a consistent snapshot on its own) selecting ``body``; parse each row."""
        try:
            rows = self.connection().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite read failed: {exc}") from exc
        return [_loads(body) for (body,) in rows]

    def body(self, sql: str, params: Sequence[Any] = ()) -> JsonDict | None:
        """Like :meth:`bodies` for at most one row."""
        rows = self.bodies(sql, params)
        return rows[0] if rows else None

    def close(self) -> None:
        """Close every connection this object opened; later use raises ``StoreError``."""
        with self._lock:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> SqliteDatabase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


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
        found = self.db.body("SELECT body FROM checkpoints WHERE id = ?", (checkpoint_id,))
        return TurnCheckpoint.from_dict(found) if found else None

    def find_by_pending(self, pending_id: str) -> TurnCheckpoint | None:
        """Follow a pendingId's pointer (closed checkpoints included)."""
        found = self.db.body(
            "SELECT c.body FROM pending_pointers p JOIN checkpoints c ON c.id = p.checkpoint_id"
            " WHERE p.pending_id = ?",
            (pending_id,),
        )
        return TurnCheckpoint.from_dict(found) if found else None

    def replace(self, cp: TurnCheckpoint) -> TurnCheckpoint:
        """Compare-and-set on ``cp.version``; VersionConflict carries the stored record or None."""
        with self.db.write() as conn:
            return _replace_checkpoint(conn, cp)

    def list_open(self, tenant: str, agent: str | None = None) -> list[TurnCheckpoint]:
        """Checkpoints of ``tenant`` not yet closed, oldest first, optionally for one agent."""
        sql = "SELECT body FROM checkpoints WHERE closed = 0 AND tenant = ?"
        params: list[str] = [tenant]
        if agent is not None:
            sql += " AND agent = ?"
            params.append(agent)
        rows = self.db.bodies(sql + " ORDER BY created_at, rowid", params)
        return [TurnCheckpoint.from_dict(found) for found in rows]


def _create_checkpoint(conn: sqlite3.Connection, cp: TurnCheckpoint) -> None:
    try:
        _insert(conn, "checkpoints", _checkpoint_row(cp))
        for pending_id in cp.outstanding:
            _insert(conn, "pending_pointers", {"pending_id": pending_id, "checkpoint_id": cp.id})
    except sqlite3.IntegrityError as exc:
        raise AlreadyExists(f"checkpoint {cp.id} or one of its pendingIds exists") from exc


def _replace_checkpoint(conn: sqlite3.Connection, cp: TurnCheckpoint) -> TurnCheckpoint:
    stored = dataclasses.replace(cp, version=cp.version + 1)
    _compare_and_set(conn, "checkpoints", "id", _checkpoint_row(stored), cp.version, TurnCheckpoint.from_dict)
    return stored


def _checkpoint_row(cp: TurnCheckpoint) -> dict[str, Any]:
    columns = {"id": cp.id, "agent": cp.agent, "tenant": cp.tenant, "closed": int(cp.closed)}
    return {**columns, "created_at": cp.created_at, "version": cp.version, "body": _dumps(cp.to_dict())}


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


def _append(
    conn: sqlite3.Connection, session_id: str, messages: Sequence[Message], expected_len: int
) -> None:
    (length,) = conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)).fetchone()
    if length != expected_len:
        raise VersionConflict(
            f"session {session_id} has {length} messages, not {expected_len}", current=length
        )
    for seq, message in enumerate(messages, start=length):
        row = {"session_id": session_id, "seq": seq, "body": _dumps(message.to_dict())}
        _insert(conn, "messages", row)


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
                _insert(conn, "turn_events", {"turn_id": change.turn_id, "body": _dumps(event)})
            for record in change.outbox:
                _put_outbox(conn, record)
        return Committed(turn, cp)

    def create_turn(self, turn: TurnRecord) -> None:
        """Store a new turn; AlreadyExists if its id is taken."""
        with self.db.write() as conn:
            _create_turn(conn, turn)

    def get_turn(self, turn_id: str) -> TurnRecord | None:
        """Read a turn."""
        found = self.db.body("SELECT body FROM turns WHERE turn_id = ?", (turn_id,))
        return TurnRecord.from_dict(found) if found else None

    def replace_turn(self, turn: TurnRecord) -> TurnRecord:
        """Compare-and-set on ``turn.version``; VersionConflict carries the stored record."""
        with self.db.write() as conn:
            return _replace_turn(conn, turn)

    def session_turns(self, session_id: str) -> list[TurnRecord]:
        """Every turn of a session, oldest first."""
        sql = "SELECT body FROM turns WHERE session_id = ? ORDER BY created_at, rowid"
        return [TurnRecord.from_dict(found) for found in self.db.bodies(sql, (session_id,))]

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

    def put_outbox(self, record: OutboxRecord) -> None:
        """Store a notification's delivery state."""
        with self.db.write() as conn:
            _put_outbox(conn, record)

    def add_event(self, turn_id: str, event: JsonDict) -> None:
        """Append one audit event."""
        with self.db.write() as conn:
            _insert(conn, "turn_events", {"turn_id": turn_id, "body": _dumps(event)})

    def events(self, turn_id: str) -> list[JsonDict]:
        """The turn's audit events in the order they were added."""
        sql = "SELECT body FROM turn_events WHERE turn_id = ? ORDER BY seq"
        return self.db.bodies(sql, (turn_id,))

    def start_call(self, call: CallRecord) -> bool:
        """Claim a call: True if this caller inserted the row, False if it was already there."""
        with self.db.write() as conn:
            inserted = _insert(conn, "tool_calls", _call_row(call), _ON_CALL_CONFLICT + "NOTHING")
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
                started = CallRecord.from_dict(_loads(found[0]))
                merged = dataclasses.replace(
                    started, outcome=call.outcome, result=call.result, finished_at=call.finished_at
                )
            upsert = _ON_CALL_CONFLICT + "UPDATE SET body = excluded.body"
            _insert(conn, "tool_calls", _call_row(merged), upsert)

    def calls(self, turn_id: str) -> dict[str, CallRecord]:
        """The turn's call records by toolUseId, in the order they were started."""
        sql = "SELECT body FROM tool_calls WHERE turn_id = ? ORDER BY rowid"
        records = [CallRecord.from_dict(found) for found in self.db.bodies(sql, (turn_id,))]
        return {record.tool_use_id: record for record in records}

    def put_config(self, config_hash: str, snapshot: JsonDict) -> None:
        """Store a snapshot under its hash; a second put of the same hash changes nothing."""
        row = {"config_hash": config_hash, "body": _dumps(snapshot)}
        with self.db.write() as conn:
            _insert(conn, "configs", row, "ON CONFLICT (config_hash) DO NOTHING")

    def get_config(self, config_hash: str) -> JsonDict | None:
        """Read a snapshot, or None."""
        return self.db.body("SELECT body FROM configs WHERE config_hash = ?", (config_hash,))


_ON_CALL_CONFLICT = "ON CONFLICT (turn_id, tool_use_id) DO "


def _turn_row(turn: TurnRecord) -> dict[str, Any]:
    columns = {"turn_id": turn.turn_id, "session_id": turn.session_id, "version": turn.version}
    return {**columns, "created_at": turn.created_at, "body": _dumps(turn.to_dict())}


def _create_turn(conn: sqlite3.Connection, turn: TurnRecord) -> None:
    try:
        _insert(conn, "turns", _turn_row(turn))
    except sqlite3.IntegrityError as exc:
        raise AlreadyExists(f"turn {turn.turn_id} exists") from exc
    _track_due(conn, turn)


def _replace_turn(conn: sqlite3.Connection, turn: TurnRecord) -> TurnRecord:
    stored = dataclasses.replace(turn, version=turn.version + 1)
    _compare_and_set(conn, "turns", "turn_id", _turn_row(stored), turn.version, TurnRecord.from_dict)
    _track_due(conn, stored)
    return stored


def _track_due(conn: sqlite3.Connection, turn: TurnRecord) -> None:
    """List ``turn`` in ``due_turns`` by its ``due_at``; drop it while nothing is due."""
    if turn.due_at is not None:
        row = {"turn_id": turn.turn_id, "due_at": turn.due_at}
        upsert = "ON CONFLICT (turn_id) DO UPDATE SET due_at = excluded.due_at"
        _insert(conn, "due_turns", row, upsert)
    else:
        conn.execute("DELETE FROM due_turns WHERE turn_id = ?", (turn.turn_id,))


def _put_outbox(conn: sqlite3.Connection, record: OutboxRecord) -> None:
    row = {"event_id": record.event_id, "turn_id": record.turn_id, "due_at": record.due_at}
    upsert = "ON CONFLICT (event_id) DO UPDATE SET due_at = excluded.due_at, body = excluded.body"
    _insert(conn, "outbox", {**row, "body": _dumps(record.to_dict())}, upsert)


def _call_row(call: CallRecord) -> dict[str, Any]:
    return {"turn_id": call.turn_id, "tool_use_id": call.tool_use_id, "body": _dumps(call.to_dict())}


def sqlite_stores(db: SqliteDatabase, clock: Clock) -> Stores:
    """The three stores on an open database; the caller owns ``db`` and closes it."""
    return Stores(SqliteCheckpointStore(db), SqliteSessionStore(db), SqliteTurnStore(db), clock, db.close)


def open_sqlite_stores(path: str, clock: Clock) -> Stores:
    """Open (creating if needed) the database at ``path`` and return the stores on it.

    The database stays open until ``stores.close()``.
    """
    return sqlite_stores(SqliteDatabase(path), clock)
