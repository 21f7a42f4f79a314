"""Ports: the few small interfaces the core talks through. Adapters implement them.

Every read-modify-write goes through a compare-and-set on a ``version`` field: ``replace`` stores
the record only if the stored version still equals ``record.version`` and bumps it by one;
otherwise it raises :class:`~loopengine.domain.base.errors.VersionConflict` carrying the current
record, so the caller needs no second read. Creates raise
:class:`~loopengine.domain.base.errors.AlreadyExists`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from loopengine.domain.base.clock import Clock
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.idempotency import IdempotencyRecord
from loopengine.domain.messages import Block, Message
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.tokens.context_window import Compaction, History
from loopengine.domain.tokens.metering import DailyUsage, Tally
from loopengine.domain.tokens.usage import Usage
from loopengine.domain.turns import CallRecord, TurnQuery, TurnRecord


class CheckpointStore(Protocol):
    """Paused batches, plus one pointer per pendingId."""

    def create(self, cp: TurnCheckpoint) -> None:
        """Write the checkpoint and a pointer per outstanding pendingId, all or nothing."""
        ...

    def get(self, checkpoint_id: str) -> TurnCheckpoint | None:
        """Read by checkpoint id."""
        ...

    def find_by_pending(self, pending_id: str) -> TurnCheckpoint | None:
        """Follow a pendingId's pointer; ``None`` for an id never handed out."""
        ...

    def find_with_turn(self, pending_id: str) -> tuple[TurnCheckpoint, TurnRecord | None] | None:
        """:meth:`find_by_pending` and the checkpoint's turn, read together.

        One round trip where the store can: a resolve needs both.
        """
        ...

    def replace(self, cp: TurnCheckpoint) -> TurnCheckpoint:
        """Compare-and-set on ``cp.version``; returns the stored record (version + 1)."""
        ...

    def get_with_config(
        self, checkpoint_id: str, config_hash: str | None
    ) -> tuple[TurnCheckpoint | None, JsonDict | None]:
        """:meth:`get` and, when ``config_hash`` is given, that config snapshot, read together.

        One round trip where the store can: a resume in a fresh process needs both.
        """
        ...

    def list_open(self, tenant: str, agent: str | None = None) -> list[TurnCheckpoint]:
        """Checkpoints of ``tenant`` that still have something to decide, oldest first.

        Bounded to one tenant by construction (on DynamoDB each tenant is its own index partition).
        """
        ...


class SessionStore(Protocol):
    """Append-only conversation history."""

    def load(self, session_id: str) -> list[Message]:
        """The whole history, in order (empty for a new session)."""
        ...

    def append(self, session_id: str, messages: list[Message], expected_len: int) -> None:
        """Append iff the history has exactly ``expected_len`` messages (else VersionConflict)."""
        ...

    def load_since_compaction(self, session_id: str) -> History:
        """The history from its latest compaction on (what a step reads; all of it if never compacted).

        What it reads is bounded by what was sent since that compaction, not by the session's age.
        """
        ...

    def compactions(self, session_id: str) -> list[Compaction]:
        """Every compaction of the session, oldest first."""
        ...


@dataclass(frozen=True, slots=True)
class Append:
    """Messages to add to a session iff its history has exactly ``expected_len`` messages."""

    session_id: str
    messages: tuple[Message, ...]
    expected_len: int


@dataclass(frozen=True, slots=True)
class Compact:
    """A compaction of a session (a :class:`~loopengine.domain.tokens.context_window.Compaction` record)."""

    session_id: str
    compaction: Compaction


@dataclass(frozen=True, slots=True)
class Change:
    """One atomic write of a state transition: all of it lands, or none of it.

    ``turn`` and ``checkpoint`` are compare-and-set on the version they carry (the stored record
    gets version + 1); ``new_turn`` / ``new_checkpoint`` are creates (a checkpoint with one pointer
    per pendingId); ``append`` adds messages to a session (VersionConflict carrying the session's
    current length, an int, if it moved). ``events`` (audit events of ``turn_id``, each with
    ``type`` and ``at``) and ``outbox`` (notifications to send) ride in the same write, so what the
    record says happened and what it announces can never disagree with the state.
    """

    turn_id: str
    turn: TurnRecord | None = None
    new_turn: TurnRecord | None = None
    checkpoint: TurnCheckpoint | None = None
    new_checkpoint: TurnCheckpoint | None = None
    append: Append | None = None
    events: tuple[JsonDict, ...] = ()
    outbox: tuple[OutboxRecord, ...] = ()
    idempotency: IdempotencyRecord | None = None
    """A client's ``Idempotency-Key`` for the turn this change creates: a create (AlreadyExists when
    an unexpired record holds the key), landing with the turn or not at all."""
    claims: tuple[CallRecord, ...] = ()
    """Tool calls claimed before they run: creates (AlreadyExists when a call was claimed already), so
    a call is claimed in the same write as the decision to run it."""
    calls: tuple[CallRecord, ...] = ()
    """Outcomes of calls this writer claimed and ran (whole records, written as given): a call's
    outcome lands with the transition that hands its result on (the results message, the checkpoint
    of a pause, the finish), never in a write of its own."""
    compact: Compact | None = None
    """A compaction of the turn's session: stored as the session's latest (and among its markers)."""
    config: tuple[str, JsonDict] | None = None
    """The config snapshot (hash, snapshot) a new turn runs under: stored with it, unless the store
    knows it is stored (snapshots never change), so a turn's start sends no write of its own for it."""

    def calls_to_store(self) -> tuple[CallRecord, ...]:
        """``calls`` as a store records them: a tool result stored once.

        A call whose result this change also stores, as it is, in the messages it appends (the batch's
        answer) or in the checkpoint it creates (``resultsSoFar``) is recorded without it: its
        outcome, tool and times stay, its ``result`` is ``None`` (read it from the session, or the
        checkpoint). Nothing reads a call's result once its batch is answered or parked.
        """
        held = [b.to_dict() for m in (self.append.messages if self.append else ()) for b in m.tool_results]
        if self.new_checkpoint is not None:
            held += [r.to_dict() for r in self.new_checkpoint.results_so_far]
        return tuple(
            replace(c, result=None) if c.result is not None and c.result in held else c for c in self.calls
        )

    tally: Tally | None = None
    """Usage to add to a tenant's daily counter (a pause's or finish's; see :mod:`~loopengine.app.usage`)."""


@dataclass(frozen=True, slots=True)
class Committed:
    """What a :class:`Change` stored (records at their new versions)."""

    turn: TurnRecord | None = None
    checkpoint: TurnCheckpoint | None = None


class TurnStore(Protocol):
    """Turn records, their audit events, per-call execution records and config snapshots."""

    def hold_wait(self, holder: str, limit: int, now: float, until: float) -> int | None:
        """Take one of ``holder``'s ``limit`` long-poll slots until ``until``; None when all are held.

        A slot whose ``until`` has passed is free again (a crashed request never holds one for ever).
        """
        ...

    def release_wait(self, holder: str, slot: int) -> None:
        """Give a slot back."""
        ...

    def get_idempotency(self, key: str) -> IdempotencyRecord | None:
        """The record of a scoped idempotency key (expired ones may still be returned: check)."""
        ...

    def commit(self, change: Change) -> Committed:
        """Write ``change`` atomically.

        A compare-and-set that lost raises VersionConflict carrying the stored record that
        conflicted (a TurnRecord or TurnCheckpoint; None when it is gone); a create whose key is
        taken raises AlreadyExists.
        """
        ...

    def create_turn(self, turn: TurnRecord) -> None:
        """Store a new turn."""
        ...

    def get_turn(self, turn_id: str) -> TurnRecord | None:
        """Read a turn."""
        ...

    def replace_turn(self, turn: TurnRecord) -> TurnRecord:
        """Compare-and-set on ``turn.version``; returns the stored record."""
        ...

    def session_turns(self, session_id: str) -> list[TurnRecord]:
        """Every turn of a session, oldest first."""
        ...

    def session_owner(self, session_id: str) -> tuple[str, str] | None:
        """(tenant, agent) of the session's first turn; None for a session with no turn.

        What it costs must not grow with the session.
        """
        ...

    def unfinished_session_turns(self, session_id: str) -> list[TurnRecord]:
        """The session's turns that have not finished, oldest first (``session_turns``' order).

        What it costs must not grow with the session's finished turns.
        """
        ...

    def due_turns(self, now: float, limit: int = 100) -> list[TurnRecord]:
        """Up to ``limit`` turns whose ``due_at`` is at or before ``now``, earliest first.

        The sweep's work list (see :mod:`loopengine.domain.turn_state`): a dead runner's lease, a retry
        that is due, an unclaimed hand-off, an expiry. It may be slightly stale (an eventually
        consistent index); whatever acts on an entry re-checks the record.
        """
        ...

    def due_outbox(self, now: float, limit: int = 100) -> list[OutboxRecord]:
        """Up to ``limit`` undelivered notifications due at or before ``now``, earliest first."""
        ...

    def list_turns(self, query: TurnQuery) -> list[TurnRecord]:
        """The turns ``query`` matches, newest first (by ``created_at``), at most ``query.limit``.

        An operator's read (``loopengine admin turns``), not a request path's: on DynamoDB it scans
        the table, so what it costs grows with the table.
        """
        ...

    def put_outbox(self, record: OutboxRecord, events: tuple[JsonDict, ...] = ()) -> None:
        """Store a notification's delivery state (create or overwrite), with ``events`` in the same write.

        ``events`` (audit events of the record's turn) are for the record's last write, its first
        delivery: a store may keep them with the record (one request, not two), and a later put of
        the same record may drop them.
        """
        ...

    def add_event(self, turn_id: str, event: JsonDict) -> None:
        """Append one audit event (it carries ``type`` and ``at``)."""
        ...

    def events(self, turn_id: str) -> list[JsonDict]:
        """The audit events of a turn, in the order they were added."""
        ...

    def start_call(self, call: CallRecord) -> bool:
        """Claim a tool call before it runs; False if it was already started (never run twice)."""
        ...

    def finish_call(self, call: CallRecord) -> None:
        """Record a started call's outcome."""
        ...

    def calls(self, turn_id: str) -> dict[str, CallRecord]:
        """The turn's call records by toolUseId.

        A finished call's ``result`` is ``None`` where its batch's answer or checkpoint holds it
        (:meth:`Change.calls_to_store`).
        """
        ...

    def daily_usage(self, tenant: str, day: str, agent: str | None = None) -> list[DailyUsage]:
        """What ``tenant``'s agents (or ``agent`` alone) used on the UTC ``day``, by agent name."""
        ...

    def put_config(self, config_hash: str, snapshot: JsonDict) -> None:
        """Store a config snapshot under its hash (idempotent)."""
        ...

    def get_config(self, config_hash: str) -> JsonDict | None:
        """Read a config snapshot."""
        ...


TextSink = Callable[[str], None]
"""Receives a model's text as it streams, piece by piece (see :attr:`ModelRequest.on_text`)."""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One Messages API call.

    ``on_text``, when set, asks the client to stream: it is called with each piece of the answer's
    text as it arrives, in order, from the thread that runs :meth:`ModelClient.create`. The pieces
    concatenated are the response's whole text as :attr:`Message.text` has it (text blocks joined
    by a newline, which arrives as a piece of its own). A client that cannot stream ignores it and
    only returns the whole response; ``create``'s answer stays the one that counts. The callback
    may raise (the caller no longer wants the call): the client lets that propagate, ending the
    call. It is not part of the request's identity (``==`` ignores it).
    """

    model: str
    system: str
    max_tokens: int
    messages: list[Message]
    tools: list[JsonDict]
    on_text: TextSink | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """What the model said: content blocks and its stop reason; and what the call cost (``usage``).

    ``==`` compares what was said only: the same answer is the same whatever it cost.
    """

    content: tuple[Block, ...]
    stop_reason: str = "end_turn"
    usage: Usage = field(default_factory=Usage, compare=False)


class ModelClient(Protocol):
    """Something that answers a Messages API request."""

    def create(self, request: ModelRequest) -> ModelResponse:
        """Call the model; raise ``ModelError`` (retryable or not) on failure.

        Streams the answer's text to ``request.on_text`` when it is set and the client can.
        """
        ...


@dataclass(frozen=True, slots=True)
class Notification:
    """An outgoing event: ``approval``, ``question``, ``run_start`` or ``run_finish``."""

    event: str
    payload: JsonDict


class Notifier(Protocol):
    """Delivers notifications; raises on failure (the caller records it and moves on)."""

    def send(self, notification: Notification) -> str:
        """Deliver; return a short description of where it went (for the audit trail)."""
        ...


class ResumeInvoker(Protocol):
    """Starts the resume of a turn elsewhere (Lambda async invoke) or in-process."""

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        """Ask for ``turn_id`` to be advanced; must not block on the turn itself.

        ``version`` is the code version the turn recorded when it started (on Lambda: the resume
        function's published version); an invoker that can pin code runs that version.
        """
        ...


@dataclass(frozen=True, slots=True)
class Stores:
    """The three stores plus the clock, as one bundle the core passes around.

    ``close`` releases the backend's resources (a SQLite file handle); a no-op where there are none.
    """

    checkpoints: CheckpointStore
    sessions: SessionStore
    turns: TurnStore
    clock: Clock
    close: Callable[[], None] = field(default=lambda: None, compare=False)
