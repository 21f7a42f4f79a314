"""Helpers shared by the core scenario tests: a harness that closes its store, protocol checks.

``scenario(...)`` wraps :func:`tests.harness.make_harness` in a temporary directory and closes the
SQLite database afterwards (pytest runs with ``filterwarnings = error``). ``assert_protocol`` is
the check every scenario ends with: the stored history obeys the Messages API tool protocol, and a
turn that is no longer waiting leaves no tool_use unanswered.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loopengine.app.ports import ModelClient
from loopengine.authoring.agent import AgentConfig
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.messages import Message, check_protocol
from loopengine.domain.turns import TurnRecord, TurnStatus
from tests.harness import Harness, make_harness


def close(h: Harness) -> None:
    """Close the SQLite database under the harness (the three stores share it)."""
    db = getattr(h.rt.stores.sessions, "db", None)
    if db is not None:
        db.close()


@contextmanager
def scenario(*configs: AgentConfig, model: ModelClient, **kw: Any) -> Iterator[Harness]:
    """A harness on a fresh SQLite file in a temporary directory, closed on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        h = make_harness(Path(tmp) / "loopengine.db", *configs, model=model, **kw)
        try:
            yield h
        finally:
            close(h)


@contextmanager
def opened(db: Path, *configs: AgentConfig, model: ModelClient, **kw: Any) -> Iterator[Harness]:
    """A harness on an existing (or new) file ``db``, closed on exit: one "process"."""
    h = make_harness(db, *configs, model=model, **kw)
    try:
        yield h
    finally:
        close(h)


def history(h: Harness, session_id: str) -> list[Message]:
    """The stored history of a session."""
    return h.rt.stores.sessions.load(session_id)


def assert_protocol(h: Harness, session_id: str) -> list[Message]:
    """Check the stored history of ``session_id``; return it.

    Every tool_use is answered by exactly one tool_result in the very next (user) message; only a
    paused turn may leave the last assistant message's tool_use blocks unanswered.
    """
    msgs = history(h, session_id)
    check_protocol(msgs)
    turns = h.rt.stores.turns.session_turns(session_id)
    waiting = any(t.status is not TurnStatus.FINISHED for t in turns)
    if msgs and not waiting:
        assert not msgs[-1].tool_uses, "a finished turn left a tool_use unanswered"
    return msgs


def results(message: Message) -> dict[str, Any]:
    """The tool_result contents of a message by tool_use_id, parsed as JSON where they are JSON."""
    out: dict[str, Any] = {}
    for block in message.tool_results:
        try:
            out[block.tool_use_id] = json.loads(block.content)
        except ValueError:
            out[block.tool_use_id] = block.content
    return out


def turn(h: Harness, turn_id: str) -> TurnRecord:
    """The stored turn record."""
    found = h.rt.stores.turns.get_turn(turn_id)
    assert found is not None
    return found


def checkpoint(h: Harness, turn_id: str) -> TurnCheckpoint:
    """The stored checkpoint the turn points at (it must have one)."""
    cp_id = turn(h, turn_id).checkpoint_id
    assert cp_id is not None
    found = h.rt.stores.checkpoints.get(cp_id)
    assert found is not None
    return found


def events(h: Harness, turn_id: str, kind: str) -> list[dict[str, Any]]:
    """The turn's audit events of one type."""
    return [e for e in h.rt.stores.turns.events(turn_id) if e["type"] == kind]
