"""How records become rows of the SQLite database (the adapters' writes, one helper per kind)."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from typing import Any

from loopengine.domain.base.errors import AlreadyExists, VersionConflict
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.idempotency import IdempotencyRecord
from loopengine.domain.messages import Message
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.turns import CallRecord, TurnRecord
from loopengine.stores.sqlite.database import compare_and_set, dumps, insert


def _create_checkpoint(conn: sqlite3.Connection, cp: TurnCheckpoint) -> None:
    try:
        insert(conn, "checkpoints", _checkpoint_row(cp))
        for pending_id in cp.outstanding:
            insert(conn, "pending_pointers", {"pending_id": pending_id, "checkpoint_id": cp.id})
    except sqlite3.IntegrityError as exc:
        raise AlreadyExists(f"checkpoint {cp.id} or one of its pendingIds exists") from exc


def _replace_checkpoint(conn: sqlite3.Connection, cp: TurnCheckpoint) -> TurnCheckpoint:
    stored = dataclasses.replace(cp, version=cp.version + 1)
    compare_and_set(conn, "checkpoints", "id", _checkpoint_row(stored), cp.version, TurnCheckpoint.from_dict)
    return stored


def _checkpoint_row(cp: TurnCheckpoint) -> dict[str, Any]:
    columns = {"id": cp.id, "agent": cp.agent, "tenant": cp.tenant, "closed": int(cp.closed)}
    return {**columns, "created_at": cp.created_at, "version": cp.version, "body": dumps(cp.to_dict())}


def _turn_row(turn: TurnRecord) -> dict[str, Any]:
    columns = {"turn_id": turn.turn_id, "session_id": turn.session_key, "version": turn.version}
    return {**columns, "created_at": turn.created_at, "body": dumps(turn.to_dict())}


def _create_turn(conn: sqlite3.Connection, turn: TurnRecord) -> None:
    try:
        insert(conn, "turns", _turn_row(turn))
    except sqlite3.IntegrityError as exc:
        raise AlreadyExists(f"turn {turn.turn_id} exists") from exc
    _track_due(conn, turn)


def _replace_turn(conn: sqlite3.Connection, turn: TurnRecord) -> TurnRecord:
    stored = dataclasses.replace(turn, version=turn.version + 1)
    compare_and_set(conn, "turns", "turn_id", _turn_row(stored), turn.version, TurnRecord.from_dict)
    _track_due(conn, stored)
    return stored


def _track_due(conn: sqlite3.Connection, turn: TurnRecord) -> None:
    """List ``turn`` in ``due_turns`` by its ``due_at``; drop it while nothing is due."""
    if turn.due_at is not None:
        row = {"turn_id": turn.turn_id, "due_at": turn.due_at}
        upsert = "ON CONFLICT (turn_id) DO UPDATE SET due_at = excluded.due_at"
        insert(conn, "due_turns", row, upsert)
    else:
        conn.execute("DELETE FROM due_turns WHERE turn_id = ?", (turn.turn_id,))


def _put_outbox(conn: sqlite3.Connection, record: OutboxRecord) -> None:
    # the column event_id holds the record's key: eventId#target (a record per target)
    row = {"event_id": record.key, "turn_id": record.turn_id, "due_at": record.due_at}
    upsert = "ON CONFLICT (event_id) DO UPDATE SET due_at = excluded.due_at, body = excluded.body"
    insert(conn, "outbox", {**row, "body": dumps(record.to_dict())}, upsert)


def _call_row(call: CallRecord) -> dict[str, Any]:
    return {"turn_id": call.turn_id, "tool_use_id": call.tool_use_id, "body": dumps(call.to_dict())}


def _claim_key(conn: sqlite3.Connection, record: IdempotencyRecord) -> None:
    """Store a key with its turn; AlreadyExists while an unexpired record holds it."""
    held = conn.execute(
        "SELECT 1 FROM idempotency_keys WHERE key = ? AND expires_at > ?", (record.key, record.created_at)
    ).fetchone()
    if held:
        raise AlreadyExists(f"idempotency key {record.key} is taken")
    conn.execute(
        "INSERT OR REPLACE INTO idempotency_keys (key, expires_at, body) VALUES (?, ?, ?)",
        (record.key, record.expires_at, dumps(record.to_dict())),
    )


def _append(
    conn: sqlite3.Connection, session_id: str, messages: Sequence[Message], expected_len: int
) -> None:
    (length,) = conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)).fetchone()
    if length != expected_len:
        raise VersionConflict(
            f"session {session_id} has {length} messages, not {expected_len}", current=length
        )
    for seq, message in enumerate(messages, start=length):
        row = {"session_id": session_id, "seq": seq, "body": dumps(message.to_dict())}
        insert(conn, "messages", row)
