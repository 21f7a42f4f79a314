"""What a human (or a policy) decided about one pending item: one typed union, from the request to the log.

    Decision = Approve | Deny | Answer | Expired | Abandoned | Skipped

Each record says which item (``pending_id``, ``tool``), when (``at``), who (``decided_by``) and through
which channel, plus what only that kind carries (an approval's edited arguments, a denial's comment, an
answer's text, the expiry policy, why an item was abandoned). The union is told apart by ``kind``, the
``decision`` key of the stored form, which is exactly what checkpoints held before these types existed
(``{"pendingId", "tool", "decision", "at", "decidedBy", "channel", ...}``), so old records still parse.

``HumanVerdict`` is the subset a person sends through a route or a button (approve / deny); the HTTP
models, the magic-link form, Slack and Lark buttons all use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from loopengine.domain.base.jsontypes import JsonDict

HumanVerdict = Literal["approve", "deny"]
HUMAN_VERDICTS: tuple[HumanVerdict, ...] = get_args(HumanVerdict)
DecisionKind = Literal["approve", "deny", "answer", "expired", "abandoned", "skipped"]

CASCADE = "cascade"
"""``decided_by`` of a sibling skipped because another item of its batch was denied."""
POLICY = "policy"
"""``decided_by`` of an item the agent's expiry policy closed."""


@dataclass(frozen=True, slots=True)
class DecidedBy:
    """Who decided, and through which channel (the server's word for it, never the client's).

    ``declared_channel`` is a label the client gave itself (``X-Loopengine-Channel``), kept beside
    the channel for the audit trail only.
    """

    identity: str
    channel: str | None = None
    declared_channel: str | None = None

    def fields(self) -> JsonDict:
        """The audit-event fields (``decidedBy``, ``channel``, and ``declaredChannel`` when declared)."""
        found: JsonDict = {"decidedBy": self.identity, "channel": self.channel}
        if self.declared_channel is not None:
            found["declaredChannel"] = self.declared_channel
        return found


@dataclass(frozen=True, slots=True, kw_only=True)
class _Record:
    kind: ClassVar[DecisionKind]
    pending_id: str
    tool: str
    at: float
    decided_by: str
    channel: str | None = None

    def _extra(self) -> JsonDict:
        return {}

    def to_dict(self) -> JsonDict:
        """The stored (camelCase) form; optional fields that are ``None`` are left out."""
        record: JsonDict = {
            "pendingId": self.pending_id,
            "tool": self.tool,
            "decision": self.kind,
            "at": self.at,
            "decidedBy": self.decided_by,
            "channel": self.channel,
        }
        record.update((k, v) for k, v in self._extra().items() if v is not None)
        return record

    @property
    def by(self) -> DecidedBy:
        """Who decided."""
        return DecidedBy(self.decided_by, self.channel)


@dataclass(frozen=True, slots=True, kw_only=True)
class Approve(_Record):
    """Approved; ``edited_args`` when the approver changed the call (they are what runs)."""

    kind: ClassVar[DecisionKind] = "approve"
    edited_args: JsonDict | None = None
    comment: str | None = None

    def _extra(self) -> JsonDict:
        return {"editedArgs": self.edited_args, "comment": self.comment}


@dataclass(frozen=True, slots=True, kw_only=True)
class Deny(_Record):
    """Denied: the batch closes and its other items are skipped."""

    kind: ClassVar[DecisionKind] = "deny"
    comment: str | None = None

    def _extra(self) -> JsonDict:
        return {"comment": self.comment}


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer(_Record):
    """A question answered."""

    kind: ClassVar[DecisionKind] = "answer"
    answer: str = ""

    def _extra(self) -> JsonDict:
        return {"answer": self.answer}


@dataclass(frozen=True, slots=True, kw_only=True)
class Expired(_Record):
    """Nobody answered in time; ``on_expiry`` says what the policy made of it (unknown or deny)."""

    kind: ClassVar[DecisionKind] = "expired"
    decided_by: str = POLICY
    channel: str | None = "expiry"
    on_expiry: str = "unknown"

    def _extra(self) -> JsonDict:
        return {"onExpiry": self.on_expiry}


@dataclass(frozen=True, slots=True, kw_only=True)
class Abandoned(_Record):
    """Closed with no decision (superseded, cancelled): the call did not run."""

    kind: ClassVar[DecisionKind] = "abandoned"
    why: str | None = None

    def _extra(self) -> JsonDict:
        return {"why": self.why}


@dataclass(frozen=True, slots=True, kw_only=True)
class Skipped(_Record):
    """Another item of the same batch was denied, so this one did not run."""

    kind: ClassVar[DecisionKind] = "skipped"
    decided_by: str = CASCADE


Decision = Approve | Deny | Answer | Expired | Abandoned | Skipped
KINDS: dict[str, type[Decision]] = {c.kind: c for c in (Approve, Deny, Answer, Expired, Abandoned, Skipped)}


def decision_from_dict(raw: JsonDict) -> Decision:
    """Parse a stored decision record (``ValueError`` for an unknown ``decision``)."""
    kind = raw.get("decision")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown decision {kind!r}")
    common: dict[str, Any] = {
        "pending_id": raw["pendingId"],
        "tool": raw.get("tool", ""),
        "at": float(raw.get("at") or 0.0),
    }
    if "decidedBy" in raw:
        common["decided_by"] = raw["decidedBy"]
    if "channel" in raw:
        common["channel"] = raw["channel"]
    extra: dict[str, Any] = {}
    if cls is Approve:
        extra = {"edited_args": raw.get("editedArgs"), "comment": raw.get("comment")}
    elif cls is Deny:
        extra = {"comment": raw.get("comment")}
    elif cls is Answer:
        extra = {"answer": raw.get("answer", "")}
    elif cls is Expired:
        extra = {"on_expiry": raw.get("onExpiry", "unknown")}
    elif cls is Abandoned:
        extra = {"why": raw.get("why")}
    return cls(**common, **extra)
