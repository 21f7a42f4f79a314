"""Logger and Metrics (AWS Lambda Powertools), shared by the three handlers.

Metrics come from the turn's own audit events (the runtime's observer), so what is counted is
exactly what was recorded: :mod:`loopengine.app.telemetry` names every metric and says which event
counts as which (the turn flow, ``UnknownOutcomes``, ``ModelErrors``, ``ModelRetries``,
``NotificationFailures`` by channel, ``TurnsRecovered``, billed tokens); the sweep adds the gauge
``OldestDueSeconds``. This module only emits them.

They are kept in memory during an invocation and flushed as CloudWatch EMF at its end: one EMF
document per set of dimension values (EMF requires every metric of a document to share its
dimensions), each publishing its metrics under the dimension sets ``[service]``,
``[service, agent]`` and, for a metric with more (``stopReason``, ``channel``, ``status``,
``tenant``), ``[service, agent, <those>]`` and ``[service, <those>]``. Alarms read the
``[service]`` series (every agent summed); the dashboard splits by agent.

Tracing is not done in code: Powertools' Tracer wraps the AWS X-Ray SDK (``aws_xray_sdk``, in
maintenance since February 2026), whose import alone cost about a quarter of the api handler's
cold start. The functions run with ``Tracing: Active`` (Lambda records each invocation's segment),
and OpenTelemetry spans come from the ADOT Lambda layer when the template's ``AdotLayerArn`` is
set (it instruments boto3 and HTTP clients from outside the code; docs/deploy.md).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from loopengine.app.telemetry import SECONDS, Metric, Signal, signals

NAMESPACE = "loopengine"
SERVICE = "loopengine"

logger = Logger(service=SERVICE)

# The event handler's DEBUG lines print each route's arguments, and a magic link's argument is
# its token (a bearer credential). With Lambda's log level (or POWERTOOLS_DEBUG) at DEBUG they
# would land in CloudWatch, so that logger never goes below INFO.
logging.getLogger("aws_lambda_powertools.event_handler").setLevel(logging.INFO)

Dimensions = tuple[tuple[str, str], ...]


class MetricBuffer:
    """The metric values of one invocation, summed (gauges: the largest) per metric and dimension values."""

    def __init__(self) -> None:
        self._values: dict[Dimensions, dict[Metric, float]] = {}
        self._lock = threading.Lock()  # the heartbeat and background resumes report from threads too

    def add(self, signal: Signal) -> None:
        """Count ``signal`` in (a gauge keeps the largest value seen)."""
        with self._lock:
            held = self._values.setdefault(signal.dimensions, {})
            if signal.metric in SECONDS:
                held[signal.metric] = max(held.get(signal.metric, signal.value), signal.value)
            else:
                held[signal.metric] = held.get(signal.metric, 0.0) + signal.value

    def drain(self) -> list[EphemeralMetrics]:
        """What was counted, one EMF document per set of dimension values; empties the buffer."""
        with self._lock:
            values, self._values = self._values, {}
        return [_emf(dims, held) for dims, held in values.items() if held]


def _emf(dims: Dimensions, held: dict[Metric, float]) -> EphemeralMetrics:
    """One EMF document: ``held`` under ``[service]`` and the sets of ``dims`` (see the module docstring)."""
    emf = EphemeralMetrics(namespace=NAMESPACE, service=SERVICE)
    named = dict(dims)
    agent = {"agent": named.pop("agent")} if "agent" in named else {}
    if agent:
        emf.add_dimensions(service=SERVICE, **agent)
    if named:
        emf.add_dimensions(service=SERVICE, **agent, **named)
        if agent:
            emf.add_dimensions(service=SERVICE, **named)
    for metric, value in sorted(held.items()):
        unit = MetricUnit.Seconds if metric in SECONDS else MetricUnit.Count
        emf.add_metric(name=metric.value, unit=unit, value=value)
    return emf


buffer = MetricBuffer()


def observe(kind: str, event: dict[str, Any]) -> None:
    """Runtime observer: count the event's metrics and log it with the turn as correlation id."""
    for signal in signals(kind, event):
        buffer.add(signal)
    logger.info(kind, extra={k: v for k, v in event.items() if k not in ("args", "text")})


def record(signal: Signal) -> None:
    """Count a value that is not an audit event (the sweep's ``OldestDueSeconds``)."""
    buffer.add(signal)


def flush() -> None:
    """Publish this invocation's metrics as EMF on stdout (nothing when none were recorded)."""
    for emf in buffer.drain():
        emf.flush_metrics()
