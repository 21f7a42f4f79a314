"""JSON shapes of DESIGN.md's HTTP API, built from domain results (one place for all of them)."""

from __future__ import annotations

from loopengine.app.outcome import TurnOutcome
from loopengine.app.request.resolution import Resolution
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint
from loopengine.domain.messages import Message
from loopengine.domain.tokens.context_window import Compaction
from loopengine.domain.tokens.metering import DailyUsage, Metered
from loopengine.domain.turns import TurnRecord, TurnStatus


def pending_item(item: PendingItem) -> JsonDict:
    """One entry of ``pendingItems``."""
    return {
        "pendingId": item.pending_id,
        "kind": item.kind,
        "tool": item.tool,
        "args": item.args,
        "reason": item.reason,
        "argsHash": item.args_hash,
    }


def turn_outcome(out: TurnOutcome) -> tuple[int, JsonDict]:
    """Status code and body for a turn's outcome (messages route, resolve with ``?wait``)."""
    if out.status not in (TurnStatus.PAUSED, TurnStatus.FINISHED):
        return 202, {"status": out.status.public(), "turnId": out.turn_id, "sessionId": out.session_id}
    base = {
        "sessionId": out.session_id,
        "turnId": out.turn_id,
        "stopReason": out.stop_reason.value if out.stop_reason else None,
    }
    if out.status is TurnStatus.PAUSED:
        items = [pending_item(p) for p in out.pending]
        return 202, {"status": "paused", "pending": True, **base, "pendingItems": items}
    return 200, {"status": "finished", **base, "text": out.text}


def resolution(res: Resolution) -> tuple[int, JsonDict]:
    """Status code and body for a resolve/answer call (without ``?wait``)."""
    if res.already_resolved:
        return 200, {"alreadyResolved": True, "expired": True} if res.expired else {"alreadyResolved": True}
    if res.outstanding:
        return 200, {"resolved": True, "outstanding": res.outstanding}
    if res.denied and not res.resuming:
        body = {"resolved": True, "outstanding": 0, "status": "finished", "stopReason": "denied"}
        return 200, {**body, "turnId": res.turn_id}
    return 202, {"resolved": True, "outstanding": 0, "status": "resuming", "turnId": res.turn_id}


def listed_item(cp: TurnCheckpoint, item: PendingItem) -> JsonDict:
    """One entry of ``GET /pending-approvals``."""
    return {
        **pending_item(item),
        "turnId": cp.turn_id,
        "sessionId": cp.session_id,
        "agent": cp.agent,
        "tenant": cp.tenant,
        "createdAt": cp.created_at,
    }


def turn_view(turn: TurnRecord, out: TurnOutcome, audit: list[JsonDict]) -> JsonDict:
    """Body of ``GET /turns/{turnId}``."""
    body: JsonDict = {
        "turnId": turn.turn_id,
        "sessionId": turn.session_id,
        "agent": turn.agent,
        "tenant": turn.tenant,
        "status": turn.status.public(),
        "stopReason": turn.stop_reason.value if turn.stop_reason else None,
        "pendingItems": [pending_item(p) for p in out.pending],
        "codeVersion": turn.code_version,
        "usage": turn.metered.as_json(),
        "audit": audit,
    }
    if turn.text is not None:
        body["text"] = turn.text
    if turn.status is TurnStatus.RETRYING:
        body["attempt"] = turn.model_failures
        body["retryAt"] = turn.due_at
    return body


STOP_NOTE = (
    "Stop means do nothing further: calls that already ran keep their effects, and a request a "
    "backend already received is not called back."
)


def cancelled(turn: TurnRecord) -> tuple[int, JsonDict]:
    """Status code and body for ``POST /turns/{turnId}/cancel``."""
    body: JsonDict = {
        "turnId": turn.turn_id,
        "status": turn.status.public(),
        "stopReason": turn.stop_reason.value if turn.stop_reason else None,
        "note": STOP_NOTE,
    }
    if turn.status is TurnStatus.FINISHED:
        body["cancelled"] = turn.stop_reason is not None and turn.stop_reason.value == "cancelled"
        return 200, body
    body["cancelled"] = False
    body["status"] = "cancelling"
    return 202, body


def session_view(
    session_id: str, messages: list[Message], compactions: list[Compaction], usage: Metered
) -> JsonDict:
    """Body of ``GET /sessions/{sessionId}``: every message, the compaction markers, the usage."""
    return {
        "sessionId": session_id,
        "messages": [m.to_dict() for m in messages],
        "compactions": [c.to_dict() for c in compactions],
        "usage": usage.as_json(),
    }


def usage_list(days: list[DailyUsage]) -> JsonDict:
    """Body of ``GET /usage``."""
    return {"items": [d.to_dict() for d in days]}


def turn_events(events: list[JsonDict], cursor: int, finished: bool) -> JsonDict:
    """Body of ``GET /turns/{turnId}/events``: the events, the ``next`` cursor, whether it finished."""
    return {"events": events, "next": cursor, "finished": finished}
