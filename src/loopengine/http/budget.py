"""How long a request may run a turn before handing it to the worker (API Gateway cuts at 30 s)."""

from __future__ import annotations

import os
from typing import Any

API_BUDGET_SECONDS = 25.0  # LOOPENGINE_API_BUDGET_SECONDS lowers it
MARGIN_SECONDS = 4.0


def remaining(context: Any) -> float | None:
    """Seconds the Lambda invocation has left; None outside Lambda."""
    left = getattr(context, "get_remaining_time_in_millis", None)
    return left() / 1000 if left is not None else None


def seconds(context: Any) -> float:
    """The turn's time budget in this request: the configured budget, within the invocation's time."""
    try:
        raw = float(os.environ.get("LOOPENGINE_API_BUDGET_SECONDS") or API_BUDGET_SECONDS)
        budget = min(API_BUDGET_SECONDS, raw)
    except ValueError:
        budget = API_BUDGET_SECONDS
    left = remaining(context)
    return max(0.0, budget if left is None else min(budget, left - MARGIN_SECONDS))
