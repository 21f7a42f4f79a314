"""The turn record: one agent turn's durable state, and the per-call records inside it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from loopengine.domain.base.ids import session_key
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.base.stored import Stored, StoredForm
from loopengine.domain.tokens.metering import Metered


class TurnStatus(StrEnum):
    """Where a turn is; see :mod:`loopengine.domain.turn_state` for who moves it between these.

    ``READY`` (its batch is complete, or it was handed off: waiting for a worker to claim it) and
    ``RETRYING`` (waiting to call the model again after a transient error) show as ``running`` in
    the HTTP API (:meth:`public`).
    """

    QUEUED = "queued"
    RUNNING = "running"
    READY = "ready"
    RETRYING = "retrying"
    PAUSED = "paused"
    FINISHED = "finished"

    def public(self) -> str:
        """The status DESIGN.md's API shows: running, retrying, paused, queued or finished."""
        return "running" if self is TurnStatus.READY else self.value


class StopReason(StrEnum):
    """Why a turn stopped (for now, or for good)."""

    END_TURN = "end_turn"
    PENDING_APPROVAL = "pending_approval"
    PENDING_QUESTION = "pending_question"
    DENIED = "denied"
    MAX_ITERATIONS = "max_iterations"
    ERROR = "error"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    TOKEN_ALLOWANCE = "token_allowance"


@dataclass(frozen=True, slots=True)
class TurnRecord(StoredForm):
    """One turn: the work on one user message, until it finishes.

    ``start_seq`` is the index in the session history of the turn's first message; ``verdicts``
    maps toolUseId to the gate's recorded verdict (decided once, never re-evaluated);
    ``lease_until`` guards a running turn against a second runner; ``stop_requested`` (cancelled
    or superseded) makes the loop stop at its next step boundary; ``sticky_tools`` were approved
    for the rest of this turn; ``queued_message`` is the user message the turn answers (the runner
    appends it to the session at ``start_seq`` if it is not there yet). ``runner`` names the
    invocation holding the lease; ``due_at`` is when the sweep must look at the turn if nothing
    else moved it (lease end, retry time, the grace of an unclaimed hand-off, the first pending
    item's expiry), ``None`` when nothing is due; ``model_failures`` counts transient model errors
    in a row. ``live``: the message came on the live channel (``"live": true``), so a pause's
    notifications wait the agent's ``live_wait`` for an inline decision first. ``queued_behind``:
    a message is queued behind this turn, so its finish starts the next one (else no read for it).
    ``metered``: what the turn's model calls used; ``counted``: how much of it the tenant's daily
    counters hold (a pause or finish adds the rest, :mod:`loopengine.domain.tokens.metering`).
    """

    turn_id: str
    session_id: str
    agent: str
    tenant: str
    config_hash: str
    start_seq: int
    created_at: float
    trigger: str = "message"
    status: TurnStatus = TurnStatus.RUNNING
    stop_reason: StopReason | None = None
    text: str | None = None
    checkpoint_id: str | None = None
    verdicts: dict[str, JsonDict] = field(default_factory=dict)
    lease_until: float = 0.0
    code_version: str | None = None
    updated_at: float = 0.0
    stop_requested: StopReason | None = None
    sticky_tools: tuple[str, ...] = ()
    queued_message: str | None = None
    queued_behind: bool = False
    scoped_session: bool = False
    runner: str | None = None
    due_at: float | None = None
    model_failures: int = 0
    live: bool = False
    metered: Metered = field(default_factory=Metered)
    counted: Metered = field(default_factory=Metered)
    version: int = 0

    @property
    def session_key(self) -> str:
        """Where the turn's session is stored (:func:`~loopengine.domain.base.ids.session_key`).

        A turn stored before session ids were scoped by tenant (``scoped_session`` false) keeps its
        session's bare id, so a turn parked across that upgrade resumes on its own history.
        """
        return session_key(self.tenant, self.session_id) if self.scoped_session else self.session_id


TurnRecord.stored = Stored(
    TurnRecord,
    always=("trigger", "status", "version"),
    keys={"metered": "usage"},
    convert={"metered": (Metered.packed, Metered.unpacked), "counted": (Metered.packed, Metered.unpacked)},
    fallback={"tenant": ""},
)
"""An optional field at its default is left out (a DynamoDB write is billed per KB)."""


@dataclass(frozen=True, slots=True)
class CallRecord(StoredForm):
    """A tool call's execution record: started (claimed) before it runs, outcome after.

    ``result`` is the tool_result block in Messages API form; ``None`` while the call is running or
    if the process died mid-call (then the outcome is reported as unknown, never re-run).
    """

    turn_id: str
    tool_use_id: str
    tool: str
    started_at: float
    outcome: str | None = None
    result: JsonDict | None = None
    finished_at: float | None = None


CallRecord.stored = Stored(CallRecord, always=("outcome", "result", "finished_at"))


@dataclass(frozen=True, slots=True)
class TurnQuery:
    """Which turns an operator lists (:meth:`TurnStore.list_turns`): every field given must match.

    ``since``: created at or after this time; ``limit``: the newest this many.
    """

    status: TurnStatus | None = None
    stop_reason: StopReason | None = None
    agent: str | None = None
    tenant: str | None = None
    since: float | None = None
    limit: int = 50

    def matches(self, turn: TurnRecord) -> bool:
        """Whether ``turn`` is one this query lists (the adapters' own filters, checked once more)."""
        return (
            (self.status is None or turn.status is self.status)
            and (self.stop_reason is None or turn.stop_reason is self.stop_reason)
            and (self.agent is None or turn.agent == self.agent)
            and (self.tenant is None or turn.tenant == self.tenant)
            and (self.since is None or turn.created_at >= self.since)
        )
