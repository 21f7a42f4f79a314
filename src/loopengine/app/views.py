"""The HTTP API's answers, built from domain results as the reply models of :mod:`loopengine.app.api_models`.

One description per answer: :mod:`~loopengine.app.api_models` declares each shape (the OpenAPI document
is generated from it), and the functions here fill that model from what the engine returned. A route
returns the model; Powertools checks it against the route's annotation and serialises it by alias
(fields without a value that the model marks ``omitted`` are left out, as DESIGN.md shows them).

pydantic is here (the api handler imports it anyway); the engine imports this module only where it
hands a library caller the same shapes as plain dicts (``open_items``, a 409's ``pendingItems``), so
the workers' cold start never builds the reply models.
"""

from __future__ import annotations

from typing import cast

from loopengine.app import api_models as m
from loopengine.app.outcome import TurnOutcome
from loopengine.app.request.resolution import Resolution
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint
from loopengine.domain.messages import Message
from loopengine.domain.tokens.context_window import Compaction
from loopengine.domain.tokens.metering import DailyUsage, Metered
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus

STOP_NOTE = (
    "Stop means do nothing further: calls that already ran keep their effects, and a request a "
    "backend already received is not called back."
)


def _stop(reason: StopReason | None) -> m.StopReasonName | None:
    return reason.value if reason is not None else None


def _turn_id(res: Resolution) -> str:
    if res.turn_id is None:  # a decision that closed its batch always names the turn
        raise ValueError("a closed batch without its turn")
    return res.turn_id


def pending_item(item: PendingItem) -> m.PendingItem:
    """One entry of ``pendingItems``."""
    return m.PendingItem(
        pendingId=item.pending_id,
        kind=item.kind,
        tool=item.tool,
        args=item.args,
        reason=item.reason,
        argsHash=item.args_hash,
    )


def listed_item(cp: TurnCheckpoint, item: PendingItem) -> m.ListedItem:
    """One entry of ``GET /pending-approvals``."""
    return m.ListedItem(
        **dict(pending_item(item)),
        turnId=cp.turn_id,
        sessionId=cp.session_id,
        agent=cp.agent,
        tenant=cp.tenant,
        createdAt=cp.created_at,
    )


def turn_outcome(out: TurnOutcome) -> tuple[int, m.TurnOutcome]:
    """Status code and body for a turn's outcome (messages route, resolve with ``?wait``)."""
    if out.status is TurnStatus.PAUSED:
        items = [pending_item(p) for p in out.pending]
        paused = m.Paused(
            status="paused",
            pending=True,
            stopReason=_stop(out.stop_reason),
            sessionId=out.session_id,
            turnId=out.turn_id,
            pendingItems=items,
        )
        return 202, paused
    if out.status is TurnStatus.FINISHED:
        finished = m.Finished(
            status="finished",
            stopReason=_stop(out.stop_reason),
            sessionId=out.session_id,
            turnId=out.turn_id,
            text=out.text,
        )
        return 200, finished
    working = cast("m.WorkingStatus", out.status.public())
    return 202, m.Working(status=working, turnId=out.turn_id, sessionId=out.session_id)


def resolution(res: Resolution) -> tuple[int, m.Resolution]:
    """Status code and body for a resolve/answer call (without ``?wait``)."""
    if res.already_resolved:
        return 200, m.AlreadyResolved(alreadyResolved=True, expired=True if res.expired else None)
    if res.outstanding:
        return 200, m.Recorded(resolved=True, outstanding=res.outstanding)
    if res.denied and not res.resuming:
        denied = m.Denied(
            resolved=True, outstanding=0, status="finished", stopReason="denied", turnId=_turn_id(res)
        )
        return 200, denied
    return 202, m.Resuming(resolved=True, outstanding=0, status="resuming", turnId=_turn_id(res))


def usage_sum(metered: Metered) -> m.UsageSum:
    """What model calls used, summed."""
    return m.UsageSum.model_validate(metered.as_json())


def turn_view(turn: TurnRecord, out: TurnOutcome, audit: list[JsonDict]) -> m.TurnView:
    """Body of ``GET /turns/{turnId}``."""
    retrying = turn.status is TurnStatus.RETRYING
    return m.TurnView(
        turnId=turn.turn_id,
        sessionId=turn.session_id,
        agent=turn.agent,
        tenant=turn.tenant,
        status=cast("m.TurnStatusName", turn.status.public()),
        stopReason=_stop(turn.stop_reason),
        text=turn.text,
        attempt=turn.model_failures if retrying else None,
        retryAt=turn.due_at if retrying else None,
        pendingItems=[pending_item(p) for p in out.pending],
        codeVersion=turn.code_version,
        usage=usage_sum(turn.metered),
        audit=audit,
    )


def cancelled(turn: TurnRecord) -> tuple[int, m.Cancelled]:
    """Status code and body for ``POST /turns/{turnId}/cancel``: 200 when stopped, 202 while stopping."""
    done = turn.status is TurnStatus.FINISHED
    body = m.Cancelled(
        turnId=turn.turn_id,
        status="finished" if done else "cancelling",
        stopReason=_stop(turn.stop_reason),
        cancelled=done and turn.stop_reason is StopReason.CANCELLED,
        note=STOP_NOTE,
    )
    return (200 if done else 202), body


def session_view(
    session_id: str, messages: list[Message], compactions: list[Compaction], usage: Metered
) -> m.SessionView:
    """Body of ``GET /sessions/{sessionId}``: every message, the compaction markers, the usage."""
    return m.SessionView(
        sessionId=session_id,
        messages=[m.HistoryMessage.model_validate(msg.to_dict()) for msg in messages],
        compactions=[m.CompactionMarker.model_validate(c.to_dict()) for c in compactions],
        usage=usage_sum(usage),
    )


def usage_list(days: list[DailyUsage]) -> m.UsageList:
    """Body of ``GET /usage``."""
    return m.UsageList(
        items=[
            m.DailyUsage(tenant=d.tenant, agent=d.agent, day=d.day, usage=usage_sum(d.metered)) for d in days
        ]
    )


def turn_events(events: list[JsonDict], cursor: int, finished: bool) -> m.TurnEvents:
    """Body of ``GET /turns/{turnId}/events``: the events, the ``next`` cursor, whether it finished."""
    return m.TurnEvents(
        events=[m.TurnEvent.model_validate(e) for e in events], next=cursor, finished=finished
    )


def wire(body: m.ResponseBody) -> JsonDict:
    """The JSON object a route sends for ``body`` (by alias, omitted fields left out)."""
    return body.model_dump(mode="json", by_alias=True)
