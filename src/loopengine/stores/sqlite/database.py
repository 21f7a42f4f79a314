"""The SQLite database behind the stores (standard library ``sqlite3`` only): file, schema, connections.

One database file in WAL mode, one connection per thread. Every write runs inside
``BEGIN IMMEDIATE``, which takes the database's write lock before the first read, so a
read-modify-write (the compare-and-set behind ``replace``, the length check behind ``append``) is
atomic across threads *and* processes on one machine; a writer that finds the lock taken waits up to
the busy timeout, then fails with :class:`~loopengine.domain.base.errors.StoreError`.

Records are stored as their JSON ``to_dict`` form in ``body``; the columns beside it (see
``SCHEMA``) exist only to filter, order or compare. The stores themselves live in
:mod:`loopengine.stores.sqlite`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from loopengine.domain.base.errors import ConfigError, StoreError, VersionConflict
from loopengine.domain.base.jsontypes import JsonDict

R = TypeVar("R")

SCHEMA = """
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
CREATE TABLE IF NOT EXISTS configs (config_hash TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS idempotency_keys (key TEXT PRIMARY KEY, expires_at REAL NOT NULL,
    body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS wait_slots (holder TEXT NOT NULL, slot INTEGER NOT NULL,
    until REAL NOT NULL, PRIMARY KEY (holder, slot));
CREATE TABLE IF NOT EXISTS compactions (session_id TEXT NOT NULL, up_to INTEGER NOT NULL,
    body TEXT NOT NULL, PRIMARY KEY (session_id, up_to));
CREATE TABLE IF NOT EXISTS usage_daily (tenant TEXT NOT NULL, day TEXT NOT NULL, agent TEXT NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
    cache_creation_input_tokens INTEGER NOT NULL, cache_read_input_tokens INTEGER NOT NULL,
    model_calls INTEGER NOT NULL, PRIMARY KEY (tenant, day, agent))
"""


def dumps(data: JsonDict) -> str:
    """A record's ``body`` column: compact JSON."""
    # ensure_ascii keeps any str (even a lone surrogate) encodable as UTF-8 for SQLite.
    return json.dumps(data, separators=(",", ":"))


def loads(body: str) -> JsonDict:
    """Parse a ``body`` column back into the record's dict."""
    data = json.loads(body)
    assert isinstance(data, dict)
    return data


def insert(conn: sqlite3.Connection, table: str, row: dict[str, Any], tail: str = "") -> int:
    """INSERT one row given as column -> value (names are internal constants); return rowcount."""
    sql = f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))}) {tail}"
    return conn.execute(sql, tuple(row.values())).rowcount


def compare_and_set(
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
    current = parse(loads(found[0])) if found else None
    raise VersionConflict(f"{table} {row[key]} is not at version {expected}", current=current)


Connections = dict[sqlite3.Connection, threading.RLock]
"""Every open connection and the lock its thread holds while using it."""


def _close_all(connections: Connections) -> None:
    """Close every connection no thread is using; one in use is left to its own thread."""
    for conn, lock in list(connections.items()):
        if lock.acquire(blocking=False):
            try:
                _release(conn, connections)
            finally:
                lock.release()


def _release(conn: sqlite3.Connection, connections: Connections) -> None:
    connections.pop(conn, None)
    with suppress(sqlite3.Error):
        conn.close()


class _ThreadConnection:
    """One thread's connection, kept in that thread's local storage, and the lock its use holds.

    The thread holds ``lock`` while it uses ``conn``; :meth:`SqliteDatabase.close` closes only a
    connection whose lock it can take at once, so it never closes one in the middle of a statement
    (that crashes the interpreter). A connection left open then is closed by its own thread: at its
    next use (which finds the database closed) or when the thread ends and drops it.
    """

    __slots__ = ("__weakref__", "conn", "depth", "lock")

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock) -> None:
        self.conn = conn
        self.lock = lock
        self.depth = 0  # uses in progress on the owning thread (a read inside a write: 2)


class SqliteDatabase:
    """One SQLite file shared by the stores: a connection per thread, writes under a lock.

    The parent directory is created if missing. ``":memory:"`` and ``""`` are refused: every
    connection (so every thread) would get its own private database. Call :meth:`close` (or use
    ``with``) to close the connections opened through this object; anything left open is closed
    when the object is garbage-collected. Nothing is closed at interpreter exit: threads still
    running then (a daemon resume) keep their connections, and the operating system releases the
    file with the process (every committed write is already in the file or its write-ahead log).
    """

    def __init__(self, path: str, busy_timeout: float = 10.0) -> None:
        if path in ("", ":memory:"):
            raise ConfigError("the SQLite store needs a file path, not a private temporary database")
        self.path = path
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: Connections = {}
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_all, self._connections)
        self._finalizer.atexit = False  # at exit other threads may be mid-statement: leave them be
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the directory for {path}") from exc
        with self.write() as conn:
            for statement in SCHEMA.split(";"):
                conn.execute(statement)

    def connection(self) -> sqlite3.Connection:
        """Return this thread's connection, opened on first use and closed when the thread ends."""
        return self._held().conn

    def _held(self) -> _ThreadConnection:
        held: _ThreadConnection | None = getattr(self._local, "held", None)
        if self._closed:
            if held is not None and not held.depth:  # left open by close(): its own thread closes it
                self._local.held = None
                with held.lock:
                    _release(held.conn, self._connections)
            raise StoreError(f"the SQLite database {self.path} is closed")
        if held is None:
            held = _ThreadConnection(self._connect(), threading.RLock())
            with self._lock:
                self._connections[held.conn] = held.lock
            weakref.finalize(held, _release, held.conn, self._connections).atexit = False
            self._local.held = held
        return held

    @contextmanager
    def _use(self) -> Iterator[sqlite3.Connection]:
        """The calling thread's connection, held (so :meth:`close` leaves it open) until the block ends."""
        held = self._held()
        with held.lock:
            if self._closed:  # closed between the check above and the lock
                raise StoreError(f"the SQLite database {self.path} is closed")
            held.depth += 1
            try:
                yield held.conn
            finally:
                held.depth -= 1

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
        with self._use() as conn:
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
        with self._use() as conn:
            try:
                rows = conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite read failed: {exc}") from exc
        return [loads(body) for (body,) in rows]

    def body(self, sql: str, params: Sequence[Any] = ()) -> JsonDict | None:
        """Like :meth:`bodies` for at most one row."""
        rows = self.bodies(sql, params)
        return rows[0] if rows else None

    def record(self, parse: Callable[[JsonDict], R], sql: str, params: Sequence[Any] = ()) -> R | None:
        """Like :meth:`body`, parsed by ``parse`` (e.g. ``TurnRecord.from_dict``)."""
        found = self.body(sql, params)
        return parse(found) if found else None

    def close(self) -> None:
        """Close the connections this object opened; later use raises ``StoreError``.

        It never waits and never closes a connection another thread is using at that moment: that
        thread closes its own, at its next use or when it ends.
        """
        with self._lock:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> SqliteDatabase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
