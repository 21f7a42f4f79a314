"""How long a request may run a turn before handing it to the worker (API Gateway cuts at 30 s).

The budget is counted from the request's **arrival**: API Gateway stamps ``requestContext.timeEpoch``
(milliseconds) when the request reaches it, and ``loopengine dev`` stamps its own before the request
queues for an environment. A cold start, or a wait for a free environment, is spent from the budget:
no answer comes later than the budget after the request arrived (API Gateway's 30 s count from then).
A stamp that cannot be a live request's (older than :data:`STALE_SECONDS`: a sample event replayed
with ``sam local invoke -e``; or more than :data:`SKEW_SECONDS` ahead) counts as arriving now.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

API_BUDGET_SECONDS = 25.0  # LOOPENGINE_API_BUDGET_SECONDS lowers it
MARGIN_SECONDS = 4.0
STALE_SECONDS = 900.0
"""A stamp older than Lambda's longest timeout is no live request's: counted as arriving now."""
SKEW_SECONDS = 60.0
"""A stamp this far ahead of the clock is no live request's either; a smaller skew counts as 0."""


def remaining(context: Any) -> float | None:
    """Seconds the Lambda invocation has left; None outside Lambda."""
    left = getattr(context, "get_remaining_time_in_millis", None)
    return left() / 1000 if left is not None else None


def configured(env: Mapping[str, str] | None = None) -> float:
    """``LOOPENGINE_API_BUDGET_SECONDS`` (it may only lower the default; malformed: the default)."""
    env = os.environ if env is None else env
    try:
        return min(API_BUDGET_SECONDS, float(env.get("LOOPENGINE_API_BUDGET_SECONDS") or API_BUDGET_SECONDS))
    except ValueError:
        return API_BUDGET_SECONDS


def since_arrival(event: Mapping[str, Any] | None, now: float) -> float:
    """Seconds since the request arrived (``requestContext.timeEpoch``); 0 when it has no usable stamp."""
    context = event.get("requestContext") if event is not None else None
    stamp = context.get("timeEpoch") if isinstance(context, Mapping) else None
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        return 0.0
    elapsed = now - stamp / 1000
    if elapsed > STALE_SECONDS or elapsed < -SKEW_SECONDS:
        return 0.0
    return max(0.0, elapsed)


def seconds(
    context: Any,
    event: Mapping[str, Any] | None = None,
    now: float | None = None,
    env: Mapping[str, str] | None = None,
) -> float:
    """The turn's time budget in this request: the configured budget less the time since arrival.

    Within the invocation's own time, too; ``now`` is the engine's clock (what the budget is
    measured on); without it the budget counts from now.
    """
    spent = 0.0 if now is None else since_arrival(event, now)
    budget = max(0.0, configured(env) - spent)
    left = remaining(context)
    return max(0.0, budget if left is None else min(budget, left - MARGIN_SECONDS))


def wait_seconds(wait: float, event: Mapping[str, Any] | None, now: float) -> float:
    """A long-poll's ``wait``, cut to what is left of the longest wait since the request arrived."""
    return max(0.0, min(wait, API_BUDGET_SECONDS - since_arrival(event, now)))
