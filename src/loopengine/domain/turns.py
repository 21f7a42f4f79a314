"""The turn record: one agent turn's durable state, and the per-call records inside it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from loopengine.domain.base.ids import session_key
from loopengine.domain.base.jsontypes import JsonDict
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
class TurnRecord:
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
    runner: str | None = None
    due_at: float | None = None
    model_failures: int = 0
    live: bool = False
    queued_behind: bool = False
    scoped_session: bool = False
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

    def to_dict(self) -> JsonDict:
        """Stored (camelCase) form; an optional field at its default is left out.

        ``from_dict`` restores it, and the record stays small (a DynamoDB write is billed per KB).
        """
        optional = {
            "stopReason": self.stop_reason.value if self.stop_reason else None,
            "text": self.text,
            "checkpointId": self.checkpoint_id,
            "verdicts": self.verdicts,
            "leaseUntil": self.lease_until,
            "codeVersion": self.code_version,
            "updatedAt": self.updated_at,
            "stopRequested": self.stop_requested.value if self.stop_requested else None,
            "stickyTools": list(self.sticky_tools),
            "queuedMessage": self.queued_message,
            "queuedBehind": self.queued_behind,
            "scopedSession": self.scoped_session,
            "runner": self.runner,
            "dueAt": self.due_at,
            "modelFailures": self.model_failures,
            "live": self.live,
            "usage": self.metered.packed() if self.metered else None,
            "counted": self.counted.packed() if self.counted else None,
        }
        return {
            "turnId": self.turn_id,
            "sessionId": self.session_id,
            "agent": self.agent,
            "tenant": self.tenant,
            "configHash": self.config_hash,
            "startSeq": self.start_seq,
            "createdAt": self.created_at,
            "trigger": self.trigger,
            "status": self.status.value,
            **{k: v for k, v in optional.items() if v not in (None, False, 0, 0.0, [], {})},
            "version": self.version,
        }

    @staticmethod
    def from_dict(d: JsonDict) -> TurnRecord:
        """Parse the stored form."""
        return TurnRecord(
            turn_id=d["turnId"],
            session_id=d["sessionId"],
            agent=d["agent"],
            tenant=d.get("tenant", ""),
            config_hash=d["configHash"],
            start_seq=int(d["startSeq"]),
            created_at=float(d["createdAt"]),
            trigger=d.get("trigger", "message"),
            status=TurnStatus(d.get("status", "running")),
            stop_reason=StopReason(d["stopReason"]) if d.get("stopReason") else None,
            text=d.get("text"),
            checkpoint_id=d.get("checkpointId"),
            verdicts=dict(d.get("verdicts") or {}),
            lease_until=float(d.get("leaseUntil", 0.0)),
            code_version=d.get("codeVersion"),
            updated_at=float(d.get("updatedAt", 0.0)),
            stop_requested=StopReason(d["stopRequested"]) if d.get("stopRequested") else None,
            sticky_tools=tuple(d.get("stickyTools") or ()),
            queued_message=d.get("queuedMessage"),
            runner=d.get("runner"),
            due_at=float(d["dueAt"]) if d.get("dueAt") is not None else None,
            model_failures=int(d.get("modelFailures", 0)),
            live=bool(d.get("live", False)),
            queued_behind=bool(d.get("queuedBehind", False)),
            scoped_session=bool(d.get("scopedSession", False)),
            metered=Metered.unpacked(d.get("usage")),
            counted=Metered.unpacked(d.get("counted")),
            version=int(d.get("version", 0)),
        )


@dataclass(frozen=True, slots=True)
class CallRecord:
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

    def to_dict(self) -> JsonDict:
        """Stored (camelCase) form."""
        return {
            "turnId": self.turn_id,
            "toolUseId": self.tool_use_id,
            "tool": self.tool,
            "startedAt": self.started_at,
            "outcome": self.outcome,
            "result": self.result,
            "finishedAt": self.finished_at,
        }

    @staticmethod
    def from_dict(d: JsonDict) -> CallRecord:
        """Parse the stored form."""
        return CallRecord(
            turn_id=d["turnId"],
            tool_use_id=d["toolUseId"],
            tool=d["tool"],
            started_at=float(d["startedAt"]),
            outcome=d.get("outcome"),
            result=d.get("result"),
            finished_at=d.get("finishedAt"),
        )


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
