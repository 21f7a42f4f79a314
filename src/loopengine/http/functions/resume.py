"""The ``resume`` Lambda: advance a turn whose batch is complete, or one handed off mid-run.

Invoked asynchronously with ``{"turnId": ...}``. Lambda delivers async events at least once and
retries failures twice, so the engine claims the turn with a compare-and-set first: a duplicate
delivery finds nothing to claim and returns ``{"resumed": false}``. Failures that escape go to the
function's on-failure destination (an SQS queue an operator can inspect and redrive).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from loopengine.domain.base.errors import NotFound
from loopengine.http import root
from loopengine.http.observability import flush, logger

SAFETY_SECONDS = 30.0


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point."""
    turn_id = event.get("turnId") if isinstance(event, dict) else None
    if not isinstance(turn_id, str) or not turn_id:
        logger.error("resume event without a turnId", extra={"event": event})
        return {"resumed": False, "error": "event needs a turnId"}
    logger.set_correlation_id(turn_id)
    budget = _budget(context)
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    left = remaining() / 1000 if remaining is not None else None
    try:
        out = root.engine().resume(turn_id, budget_seconds=budget, remaining_seconds=left)
    except NotFound:
        # A retry cannot make the turn appear: answer, don't fail into the redrive queue.
        logger.error("resume of a turn that does not exist")
        return {"resumed": False, "turnId": turn_id, "reason": "no such turn"}
    finally:
        flush()
    if out is None:
        logger.info("nothing to resume (duplicate delivery or already running)")
        return {"resumed": False, "turnId": turn_id}
    status = out.status.value
    return {"resumed": True, "turnId": turn_id, "status": status, "stopReason": out.stop_reason}


def _budget(context: Any) -> float | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    left: float = remaining() / 1000 - SAFETY_SECONDS
    return max(5.0, left)
