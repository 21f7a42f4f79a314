"""The HTTP API's request and response bodies as pydantic models (DESIGN.md "HTTP API").

One place for the wire contract: the api handler validates requests against these models (a resolve
body becomes the typed verdict, :meth:`ResolveRequest.verdict`), its routes answer with these models
(:mod:`loopengine.app.views` fills them from domain results) and Powertools checks and serialises them,
and the OpenAPI document (``GET /openapi.json``, ``docs/openapi.json``) is generated from them.
Field names are the wire's camelCase. Requests ignore unknown fields (a newer client may send more);
responses list every field they carry (``additionalProperties: false``), so a response that drifts
from its model fails the contract tests.

pydantic only: no boto3, no Powertools (the core stays importable without them). Every model is
built on first use (``defer_build``): a cold start validates with the few a route needs, not all of
them (under SnapStart all are built before the snapshot, docs/performance.md).
"""

# No `from __future__ import annotations`: pydantic would compile each string annotation of the
# models below in every cold start (docs/performance.md "Cold start").
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from loopengine.domain.base import ids
from loopengine.domain.base.limits import (
    MAX_ANSWER_CHARS,
    MAX_COMMENT_CHARS,
    MAX_MESSAGE_CHARS,
)
from loopengine.domain.decisions import Approval, ApprovalScope, Denial, HumanVerdict, Reply, Verdict

_CLIENT_ID = rf"[A-Za-z0-9][A-Za-z0-9_.:@-]{{0,{ids.MAX_CLIENT_ID_CHARS - 1}}}"
CLIENT_ID_PATTERN = f"^{_CLIENT_ID}$"
"""A sessionId or tenant a client may choose (the form ``ids.is_session_id`` accepts)."""
NOT_BLANK = r"[^\t\n\x0b\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
"""Holds a character that is not white space (Python's ``str.isspace``, as the engine checks)."""
AGENT_PATTERN = r"^[A-Za-z0-9_-]+$"
"""An agent's name (its folder's ``agent.yaml`` ``name``)."""
TENANT_PATTERN = f"^(|{_CLIENT_ID})$"
PENDING_ID_PATTERN = r"^pnd_[0-9a-f]{32}$"
TURN_ID_PATTERN = r"^trn_[0-9a-f]{32}$"

ClientId = Annotated[str, Field(pattern=TENANT_PATTERN)]
"""A client-chosen id in a body; the empty string means "none"."""


def _absent(value: object) -> bool:
    return value is None


def omitted(description: str) -> Any:
    """A response field left out of the body (not ``null``) when it has no value."""
    return Field(default=None, exclude_if=_absent, description=description)


class Request(BaseModel):
    """A request body: unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore", defer_build=True)


class ResponseBody(BaseModel):
    """A response body: exactly the fields listed."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


# -- requests ---------------------------------------------------------------------------------------


class MessageRequest(Request):
    """``POST /agents/{agent}/messages``."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"message": "Order A-1001 arrived broken"}]})

    message: str = Field(
        min_length=1, max_length=MAX_MESSAGE_CHARS, pattern=NOT_BLANK, description="the user's message"
    )
    sessionId: ClientId | None = Field(
        default=None, description="continue this session (ours, or a client-chosen id); new when absent"
    )
    tenant: ClientId | None = Field(default=None, description="the tenant to act in (default: the caller's)")
    live: bool = Field(
        default=False,
        strict=True,
        description=(
            "the user is attached (loopengine chat): pending items wait the agent's live_wait for an "
            "inline decision before the other channels are notified"
        ),
    )


class ResolveRequest(Request):
    """``POST /pending-approvals/{pendingId}/resolve``."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"decision": "approve", "comment": "ok"}]})

    decision: HumanVerdict
    editedArgs: dict[str, Any] | None = Field(
        default=None, description="approve with these arguments instead (validated against the tool's schema)"
    )
    comment: str | None = Field(default=None, max_length=MAX_COMMENT_CHARS)
    argsHash: str | None = Field(
        default=None, description="the argsHash the decider saw; 409 when the pending call is another"
    )
    scope: ApprovalScope | None = Field(
        default=None, description='"turn": later calls of this tool in the turn run without asking'
    )

    def verdict(self) -> Verdict:
        """The typed verdict this body asks for (a deny keeps only its comment and argsHash)."""
        if self.decision == "deny":
            return Denial(comment=self.comment, args_hash=self.argsHash)
        return Approval(
            edited_args=self.editedArgs, comment=self.comment, args_hash=self.argsHash, scope=self.scope
        )


class AnswerRequest(Request):
    """``POST /pending-questions/{pendingId}/answer``."""

    answer: str = Field(min_length=1, max_length=MAX_ANSWER_CHARS, pattern=NOT_BLANK)

    def reply(self) -> Reply:
        """The typed answer."""
        return Reply(self.answer)


# -- responses --------------------------------------------------------------------------------------

StopReasonName = Literal[
    "end_turn",
    "pending_approval",
    "pending_question",
    "denied",
    "superseded",
    "cancelled",
    "expired",
    "error",
    "max_iterations",
    "token_allowance",
]
WorkingStatus = Literal["running", "retrying", "queued"]
TurnStatusName = Literal["running", "retrying", "paused", "queued", "finished"]


class PendingItem(ResponseBody):
    """One entry of ``pendingItems``."""

    pendingId: str
    kind: Literal["approval", "question"]
    tool: str
    args: dict[str, Any]
    reason: str | None
    argsHash: str


class ListedItem(PendingItem):
    """One open item of ``GET /pending-approvals``."""

    turnId: str
    sessionId: str
    agent: str
    tenant: str
    createdAt: float


class PendingList(ResponseBody):
    """``GET /pending-approvals``."""

    items: list[ListedItem]


class Finished(ResponseBody):
    """The turn finished within the request."""

    status: Literal["finished"]
    stopReason: StopReasonName | None
    sessionId: str
    turnId: str
    text: str | None


class Paused(ResponseBody):
    """The turn paused for a human."""

    status: Literal["paused"]
    pending: Literal[True]
    stopReason: StopReasonName | None
    sessionId: str
    turnId: str
    pendingItems: list[PendingItem]


class Working(ResponseBody):
    """Still working past the request's time budget.

    Or queued behind a parked turn, or waiting to retry a model call that failed transiently.
    """

    status: WorkingStatus
    turnId: str
    sessionId: str
    attempt: int | SkipJsonSchema[None] = omitted("retrying: how many model calls failed in a row")
    retryAt: float | SkipJsonSchema[None] = omitted("retrying: when the next attempt is due (Unix seconds)")


TurnOutcome = Finished | Paused | Working
"""What the messages route (and resolve with ``?wait``) answers."""


class AlreadyResolved(ResponseBody):
    """A closed or unknown pendingId: nothing happened, and that is not an error."""

    alreadyResolved: Literal[True]
    expired: Literal[True] | SkipJsonSchema[None] = omitted("the item expired before this decision")


class Recorded(ResponseBody):
    """Decision recorded; other items of the batch are still outstanding."""

    resolved: Literal[True]
    outstanding: int = Field(ge=1)


class Resuming(ResponseBody):
    """The last outstanding item: the turn resumes."""

    resolved: Literal[True]
    outstanding: Literal[0]
    status: Literal["resuming"]
    turnId: str


class Denied(ResponseBody):
    """A denial finishes the turn at once."""

    resolved: Literal[True]
    outstanding: Literal[0]
    status: Literal["finished"]
    stopReason: Literal["denied"]
    turnId: str


Resolution = AlreadyResolved | Recorded | Resuming | Denied
ResolveOutcome = Resolution | TurnOutcome
"""What resolve / answer answer: the resolution, or with ``?wait`` the turn's outcome."""


class UsageSum(ResponseBody):
    """Token usage summed over model calls (the Messages API's four counts) and how many calls."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cache_creation_input_tokens: int = Field(ge=0)
    cache_read_input_tokens: int = Field(ge=0)
    modelCalls: int = Field(ge=0)


class DailyUsage(ResponseBody):
    """What one agent of one tenant used on one UTC day."""

    tenant: str
    agent: str
    day: str = Field(description="YYYY-MM-DD, UTC")
    usage: UsageSum


class UsageList(ResponseBody):
    """``GET /usage``."""

    items: list[DailyUsage]


class TurnView(ResponseBody):
    """``GET /turns/{turnId}``."""

    turnId: str
    sessionId: str
    agent: str
    tenant: str
    status: TurnStatusName
    stopReason: StopReasonName | None
    text: str | SkipJsonSchema[None] = omitted("the final text, once finished")
    attempt: int | SkipJsonSchema[None] = omitted("retrying: how many model calls failed in a row")
    retryAt: float | SkipJsonSchema[None] = omitted("retrying: when the next attempt is due (Unix seconds)")
    pendingItems: list[PendingItem]
    codeVersion: str | None
    usage: UsageSum = Field(description="what the turn's model calls used, summed")
    audit: list[dict[str, Any]] = Field(description="the turn's audit events, oldest first")


class Cancelled(ResponseBody):
    """``POST /turns/{turnId}/cancel``: 200 when stopped, 202 while a running turn stops."""

    turnId: str
    status: Literal["running", "paused", "queued", "finished", "cancelling"]
    stopReason: StopReasonName | None
    cancelled: bool
    note: str


class HistoryMessage(ResponseBody):
    """One message of a session, blocks in the Messages API shape."""

    role: Literal["user", "assistant"]
    content: list[dict[str, Any]]


class CompactionMarker(ResponseBody):
    """A compaction: messages before ``upTo`` are no longer sent to the model (the summary, if any, is)."""

    upTo: int = Field(ge=1)
    summary: str | SkipJsonSchema[None] = omitted("what stands in for them (strategy summarize)")


class SessionView(ResponseBody):
    """``GET /sessions/{sessionId}``."""

    sessionId: str
    messages: list[HistoryMessage]
    compactions: list[CompactionMarker] = Field(description="the session's compactions, oldest first")
    usage: UsageSum = Field(description="what the session's model calls used, summed")


class TurnEvent(BaseModel):
    """One audit event of a turn: its ``seq``, ``type`` and time, plus the fields of that type."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    seq: int = Field(ge=1)
    type: str
    at: float


class TurnEvents(ResponseBody):
    """``GET /turns/{turnId}/events``: events after ``after``, the cursor to ask from next."""

    events: list[TurnEvent]
    next: int = Field(ge=0, description="pass as ?after= to get only what came since")
    finished: bool = Field(description="the turn has finished: its finished event is in the list")


class Health(ResponseBody):
    """``GET /health``."""

    status: Literal["ok"]


class ErrorBody(BaseModel):
    """Every error: a code and a message (a 409 may add ``turnId`` / ``pendingItems``)."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    error: str = Field(description="a stable code: invalid_input, bad_json, unauthorized, not_found, ...")
    message: str
