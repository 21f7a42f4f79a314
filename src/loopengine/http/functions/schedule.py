"""The ``schedule`` Lambda: EventBridge rules start unattended turns and sweep expired items.

A rule's ``Input`` is delivered as the event: ``{"agent", "message", "sessionId"?, "tenant"?}``.
The turn runs with ``trigger: "schedule"`` (run_start / run_finish carry it) and, past its time
budget, is handed to the resume worker like any other turn.

``{"action": "sweep"}`` finds every stalled turn (docs/reliability.md): it expires due pending items,
re-invokes turns whose runner died, that were never claimed or whose model retry is due, and resends
undelivered notifications; it returns ``{"swept": <items expired>}`` plus ``"recovered": <turns
handed on>`` and ``"notified": <notifications tried>`` when there were any.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from loopengine.domain.base.errors import LoopengineError
from loopengine.http import root
from loopengine.http.observability import flush, logger, oldest_due, record

SAFETY_SECONDS = 30.0


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point."""
    if isinstance(event, dict) and event.get("action") == "sweep":
        # Expiry is a policy decided here (pending_ttl / on_expiry), never by DynamoDB TTL,
        # which only removes long-dead records.
        try:
            done = root.engine().sweep()
            record(oldest_due(done.oldest_due))  # every sweep reports it: a silent sweep is itself an alarm
        finally:
            flush()
        counts: dict[str, float] = {"expired": done.expired, "recovered": done.recovered}
        counts |= {"notified": done.notified, "oldestDueSeconds": round(done.oldest_due, 1)}
        logger.info("sweep", extra=counts)
        swept: dict[str, Any] = {"swept": done.expired}
        if done.recovered:
            swept["recovered"] = done.recovered
        if done.notified:
            swept["notified"] = done.notified
        return swept
    if (
        not isinstance(event, dict)
        or not isinstance(event.get("agent"), str)
        or not isinstance(event.get("message"), str)
    ):
        logger.error("schedule event needs 'agent' and 'message'", extra={"event": event})
        return {"started": False, "error": "schedule input needs 'agent' and 'message'"}
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    budget = max(5.0, remaining() / 1000 - SAFETY_SECONDS) if remaining else None
    try:
        out = root.engine().send_message(
            event["agent"],
            event["message"],
            session_id=event.get("sessionId") or None,
            tenant=event.get("tenant") or "",
            trigger="schedule",
            budget_seconds=budget,
        )
    except LoopengineError as exc:
        logger.error("scheduled turn did not start", extra={"error": str(exc), "code": exc.code})
        return {"started": False, "error": str(exc)}
    finally:
        flush()
    logger.set_correlation_id(out.turn_id)
    return {
        "started": True,
        "turnId": out.turn_id,
        "sessionId": out.session_id,
        "status": out.status.value,
        "stopReason": out.stop_reason,
    }
