"""What a person asks of a pending item, and what the log records about it: two typed unions.

    Verdict  = Approval | Denial        what a person sends to decide an approval (the request side)
    Reply                               what a person sends to answer a question
    Decision = Approve | Deny | Answer | Expired | Abandoned | Skipped    what the log records

**The request side** is what an edge parses a click or a body into, and what
``Engine.resolve(pending_id, verdict, decider)`` / ``Engine.answer(pending_id, reply, decider)`` take:
an :class:`Approval` (maybe with edited arguments, a comment, the ``argsHash`` the decider saw and
``scope="turn"``), a :class:`Denial` (a comment, the ``argsHash``) or a :class:`Reply` (the answer's
text). Each checks its own fields when it is built (``InvalidInput``), so the engine dispatches on the
type and re-checks no words. The wire's words (``"approve"`` / ``"deny"``, :data:`HumanVerdict`) stay
at the edges that read them: the HTTP models, the magic-link and inbox forms, Slack and Lark buttons.

**The log side** records who decided which item (``pending_id``, ``tool``), when (``at``), through which
channel, plus what of the verdict is kept (an approval's edited arguments and comment, a denial's
comment, an answer's text) and the decisions nobody sent (the expiry policy, an abandoned item, a
sibling skipped). A verdict's preconditions (``argsHash``, ``scope``) are checked, never stored, which
is why the two sides are separate types: imperative nouns for what is asked, the record's kind for
what happened. The log union is told apart by ``kind``, the ``decision`` key of the stored form,
which is exactly what checkpoints held before these types existed (``{"pendingId", "tool",
"decision", "at", "decidedBy", "channel", ...}``), so old records still parse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.base.jsontypes import JsonDict

HumanVerdict = Literal["approve", "deny"]
"""The wire's words for a verdict (a resolve body's ``decision``, a button's value)."""
HUMAN_VERDICTS: tuple[HumanVerdict, ...] = get_args(HumanVerdict)
ApprovalScope = Literal["turn"]
"""How far an approval reaches beyond its call: ``"turn"``, later calls of the tool in the turn."""
DecisionKind = Literal["approve", "deny", "answer", "expired", "abandoned", "skipped"]

CASCADE = "cascade"
"""``decided_by`` of a sibling skipped because another item of its batch was denied."""
POLICY = "policy"
"""``decided_by`` of an item the agent's expiry policy closed."""


def _text_or_none(value: object, name: str) -> None:
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string")


@dataclass(frozen=True, slots=True, kw_only=True)
class Approval:
    """Approve a pending call: as asked, or with ``edited_args`` (a new call, checked and re-gated).

    ``args_hash``: the call the decider saw (409 when the item is another); ``scope="turn"``: later
    calls of the same tool in this turn run without asking.
    """

    word: ClassVar[HumanVerdict] = "approve"
    edited_args: JsonDict | None = None
    comment: str | None = None
    args_hash: str | None = None
    scope: ApprovalScope | None = None

    def __post_init__(self) -> None:
        _text_or_none(self.comment, "comment")
        _text_or_none(self.args_hash, "argsHash")
        if self.scope not in (None, "turn"):
            raise InvalidInput("scope must be 'turn' (or left out)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Denial:
    """Deny a pending call: the batch closes and its other items are skipped."""

    word: ClassVar[HumanVerdict] = "deny"
    comment: str | None = None
    args_hash: str | None = None

    def __post_init__(self) -> None:
        _text_or_none(self.comment, "comment")
        _text_or_none(self.args_hash, "argsHash")


Verdict = Approval | Denial
"""What decides a pending approval."""


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer a pending question (one of its options, unless it allows free text)."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise InvalidInput("answer must be a non-empty string")


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
    stored: ClassVar[tuple[tuple[str, str, Any], ...]] = ()
    """What only this kind carries: (stored key, field, value when the stored form lacks it)."""
    pending_id: str
    tool: str
    at: float
    decided_by: str
    channel: str | None = None

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
        for key, name, _ in self.stored:
            value = getattr(self, name)
            if value is not None:
                record[key] = value
        return record

    @property
    def by(self) -> DecidedBy:
        """Who decided."""
        return DecidedBy(self.decided_by, self.channel)


@dataclass(frozen=True, slots=True, kw_only=True)
class Approve(_Record):
    """Approved; ``edited_args`` when the approver changed the call (they are what runs)."""

    kind: ClassVar[DecisionKind] = "approve"
    stored = (("editedArgs", "edited_args", None), ("comment", "comment", None))
    edited_args: JsonDict | None = None
    comment: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Deny(_Record):
    """Denied: the batch closes and its other items are skipped."""

    kind: ClassVar[DecisionKind] = "deny"
    stored = (("comment", "comment", None),)
    comment: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer(_Record):
    """A question answered."""

    kind: ClassVar[DecisionKind] = "answer"
    stored = (("answer", "answer", ""),)
    answer: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Expired(_Record):
    """Nobody answered in time; ``on_expiry`` says what the policy made of it (unknown or deny)."""

    kind: ClassVar[DecisionKind] = "expired"
    stored = (("onExpiry", "on_expiry", "unknown"),)
    decided_by: str = POLICY
    channel: str | None = "expiry"
    on_expiry: str = "unknown"


@dataclass(frozen=True, slots=True, kw_only=True)
class Abandoned(_Record):
    """Closed with no decision (superseded, cancelled): the call did not run."""

    kind: ClassVar[DecisionKind] = "abandoned"
    stored = (("why", "why", None),)
    why: str | None = None


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
    fields: dict[str, Any] = {
        "pending_id": raw["pendingId"],
        "tool": raw.get("tool", ""),
        "at": float(raw.get("at") or 0.0),
    }
    if "decidedBy" in raw:
        fields["decided_by"] = raw["decidedBy"]
    if "channel" in raw:
        fields["channel"] = raw["channel"]
    fields.update((name, raw.get(key, absent)) for key, name, absent in cls.stored)
    return cls(**fields)
