"""Logger and Metrics (AWS Lambda Powertools), shared by the three handlers.

Metrics come from the turn's own audit events (the runtime's observer), so what is counted is
exactly what was recorded: TurnsStarted, TurnsPaused, Decisions, TurnsResumed, TurnsFinished,
NotificationFailures, ToolCalls. They are flushed as CloudWatch EMF at the end of each invocation.

Tracing is not done in code: Powertools' Tracer wraps the AWS X-Ray SDK (``aws_xray_sdk``, in
maintenance since February 2026), whose import alone cost about a quarter of the api handler's
cold start. The functions run with ``Tracing: Active`` (Lambda records each invocation's segment),
and OpenTelemetry spans come from the ADOT Lambda layer when the template's ``AdotLayerArn`` is
set (it instruments boto3 and HTTP clients from outside the code; docs/deploy.md).
"""

from __future__ import annotations

import logging
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

logger = Logger(service="loopengine")
metrics = Metrics(namespace="loopengine", service="loopengine")

# The event handler's DEBUG lines print each route's arguments, and a magic link's argument is
# its token (a bearer credential). With Lambda's log level (or POWERTOOLS_DEBUG) at DEBUG they
# would land in CloudWatch, so that logger never goes below INFO.
logging.getLogger("aws_lambda_powertools.event_handler").setLevel(logging.INFO)

EVENT_METRICS = {
    "started": "TurnsStarted",
    "paused": "TurnsPaused",
    "decided": "Decisions",
    "resumed": "TurnsResumed",
    "finished": "TurnsFinished",
    "notification_failed": "NotificationFailures",
    "tool_outcome": "ToolCalls",
}


def observe(kind: str, event: dict[str, Any]) -> None:
    """Runtime observer: count the event and log it with the turn as correlation id."""
    name = EVENT_METRICS.get(kind)
    if name is not None:
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)
    logger.info(kind, extra={k: v for k, v in event.items() if k not in ("args", "text")})


def flush() -> None:
    """Publish this invocation's metrics (nothing when none were recorded)."""
    if metrics.metric_set:
        metrics.flush_metrics()
