"""The four notification events, one pydantic model each, built here and nowhere else.

    approval    a gated call waits for a decision      (X-Actauth-Signature on a webhook)
    question    the model asked the user something     (X-Askuser-Signature)
    run_start   a turn starts or resumes               (X-Loopengine-Signature)
    run_finish  a turn finished, with its final text   (X-Loopengine-Signature)

Every channel sends the same document: ``{"event": ..., "eventId": ..., <the fields below>}``
(camelCase, DESIGN.md "Notifications"); ``eventId`` is added by the outbox when the notification is
recorded, so a retry carries the same one. The JSON Schema of each event is published in
``docs/notifications.schema.json`` (``python -m loopengine.domain.notifications`` writes it; a test
keeps it current), so a receiver can validate what it gets.
"""

# No `from __future__ import annotations`: pydantic would compile each string annotation of the
# models below in every cold start (docs/performance.md "Cold start").
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel

from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import PendingItem
from loopengine.domain.turns import TurnRecord

Trigger = Literal["message", "resume", "schedule"]


class _Event(BaseModel):
    # built on first use (defer_build): a cold start that sends no notification never builds them
    model_config = ConfigDict(
        frozen=True, alias_generator=to_camel, populate_by_name=True, extra="forbid", defer_build=True
    )

    turn_id: str
    session_id: str
    agent: str
    tenant: str = ""

    def payload(self) -> JsonDict:
        """The fields as the wire carries them (camelCase), without ``event`` (the envelope's)."""
        return self.model_dump(mode="json", by_alias=True, exclude={"event"})


class ApprovalEvent(_Event):
    """A gated call waits for a decision."""

    event: Literal["approval"] = "approval"
    pending_id: str
    tool: str
    args: JsonDict
    args_hash: str
    reason: str
    resolve_url: str


class QuestionEvent(_Event):
    """The model asked the user a question (``system_ask_user``)."""

    event: Literal["question"] = "question"
    pending_id: str
    question: Any = None
    options: Any = None
    args_hash: str
    reason: str
    resolve_url: str


class RunStartEvent(_Event):
    """A turn starts (``message``, ``schedule``) or resumes (``resume``)."""

    event: Literal["run_start"] = "run_start"
    trigger: str


class RunFinishEvent(_Event):
    """A turn finished; ``text`` is its final text (``None`` when it stopped without one)."""

    event: Literal["run_finish"] = "run_finish"
    stop_reason: str
    text: str | None
    trigger: str


NotificationEvent = Annotated[
    ApprovalEvent | QuestionEvent | RunStartEvent | RunFinishEvent, Field(discriminator="event")
]
EVENTS = ("approval", "question", "run_start", "run_finish")


def _of(turn: TurnRecord) -> dict[str, Any]:
    """The fields every event takes from its turn (:class:`_Event`'s)."""
    return {
        "turn_id": turn.turn_id,
        "session_id": turn.session_id,
        "agent": turn.agent,
        "tenant": turn.tenant,
    }


def for_item(turn: TurnRecord, item: PendingItem, public_url: str) -> ApprovalEvent | QuestionEvent:
    """The ``approval`` or ``question`` event for one pending item."""
    base = public_url.rstrip("/")
    common: dict[str, Any] = {
        **_of(turn),
        "pending_id": item.pending_id,
        "args_hash": item.args_hash,
        "reason": item.reason,
    }
    if item.kind == "question":
        url = f"{base}/pending-questions/{item.pending_id}/answer"
        return QuestionEvent(
            **common, question=item.args.get("question"), options=item.args.get("options"), resolve_url=url
        )
    url = f"{base}/pending-approvals/{item.pending_id}/resolve"
    return ApprovalEvent(**common, tool=item.tool, args=item.args, resolve_url=url)


def run_start(turn: TurnRecord, trigger: str) -> RunStartEvent:
    """The ``run_start`` event of a turn that starts or resumes."""
    return RunStartEvent(**_of(turn), trigger=trigger)


def run_finish(turn: TurnRecord, stop_reason: str, text: str | None) -> RunFinishEvent:
    """The ``run_finish`` event of a finished turn."""
    return RunFinishEvent(**_of(turn), stop_reason=stop_reason, text=text, trigger=turn.trigger)


def parse(document: JsonDict) -> ApprovalEvent | QuestionEvent | RunStartEvent | RunFinishEvent:
    """A received notification as its model (pydantic ``ValidationError`` when it is not one)."""
    fields = {k: v for k, v in document.items() if k != "eventId"}
    adapter: TypeAdapter[Any] = TypeAdapter(NotificationEvent)
    parsed: ApprovalEvent | QuestionEvent | RunStartEvent | RunFinishEvent = adapter.validate_python(fields)
    return parsed


def json_schema() -> JsonDict:
    """One JSON Schema for the four events (``oneOf``, told apart by ``event``), with ``eventId``."""
    adapter: TypeAdapter[Any] = TypeAdapter(NotificationEvent)
    schema: JsonDict = adapter.json_schema(by_alias=True)
    schema["title"] = "loopengine notification"
    schema["description"] = (
        "What every channel sends; eventId is stable across retries (drop duplicates by it)."
    )
    for model in schema.get("$defs", {}).values():
        model.setdefault("properties", {})["eventId"] = {"type": "string", "pattern": "^evt_[0-9a-f]{32}$"}
        model.setdefault("required", []).append("eventId")
    return schema


if __name__ == "__main__":  # python -m loopengine.domain.notifications > docs/notifications.schema.json
    print(json.dumps(json_schema(), indent=2, sort_keys=True))
