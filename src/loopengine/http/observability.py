"""Logger and Metrics (AWS Lambda Powertools), shared by the three handlers.

Metrics come from the turn's own audit events: the core reports every event of a landed write
through the runtime's observer (``Runtime.observer(kind, event)``, with the turn's ``agent`` and
``tenant`` beside it) and never imports Powertools; :func:`observe` is that observer. So what is
counted is exactly what was recorded. :class:`Metric` is the one list of names, :func:`signals`
says which event counts as which (the turn flow, ``UnknownOutcomes``, ``ModelErrors``,
``ModelRetries``, ``NotificationFailures`` by channel, ``TurnsRecovered``, billed tokens), and the
sweep adds the gauge ``OldestDueSeconds`` from its result (:func:`oldest_due`).
:data:`FAILURE_METRICS` are the ones an operator is woken for: template.yaml has an alarm on each
and docs/operations.md a section (tests/test_operations.py checks both).

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
from enum import StrEnum
from typing import Any, NamedTuple

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from loopengine.domain.base.jsontypes import JsonDict


class Metric(StrEnum):
    """Every metric loopengine emits (namespace ``loopengine``)."""

    TURNS_STARTED = "TurnsStarted"
    TURNS_PAUSED = "TurnsPaused"
    DECISIONS = "Decisions"
    TURNS_RESUMED = "TurnsResumed"
    TURNS_FINISHED = "TurnsFinished"
    TOOL_CALLS = "ToolCalls"
    UNKNOWN_OUTCOMES = "UnknownOutcomes"
    MODEL_ERRORS = "ModelErrors"
    MODEL_RETRIES = "ModelRetries"
    NOTIFICATION_FAILURES = "NotificationFailures"
    TURNS_RECOVERED = "TurnsRecovered"
    OLDEST_DUE_SECONDS = "OldestDueSeconds"
    TOKENS_BILLED = "TokensBilled"
    OUTPUT_TOKENS = "OutputTokens"


FAILURE_METRICS = frozenset(
    {
        Metric.UNKNOWN_OUTCOMES,
        Metric.MODEL_ERRORS,
        Metric.MODEL_RETRIES,
        Metric.NOTIFICATION_FAILURES,
        Metric.TURNS_RECOVERED,
        Metric.OLDEST_DUE_SECONDS,
    }
)
"""The failure signals: each has an alarm in template.yaml and a runbook section in docs/operations.md."""

EXTRA: dict[Metric, tuple[str, ...]] = {
    Metric.TURNS_PAUSED: ("stopReason",),
    Metric.TURNS_FINISHED: ("stopReason",),
    Metric.NOTIFICATION_FAILURES: ("channel",),
    Metric.TURNS_RECOVERED: ("status",),
    Metric.TOKENS_BILLED: ("tenant",),
    Metric.OUTPUT_TOKENS: ("tenant",),
}
"""Dimensions a metric carries besides ``service`` and ``agent``."""

SECONDS = frozenset({Metric.OLDEST_DUE_SECONDS})
"""Gauges in seconds (the largest value of a period counts); every other metric is a count summed."""

_COUNTED: dict[str, Metric] = {
    "started": Metric.TURNS_STARTED,
    "paused": Metric.TURNS_PAUSED,
    "decided": Metric.DECISIONS,
    "resumed": Metric.TURNS_RESUMED,
    "finished": Metric.TURNS_FINISHED,
    "tool_outcome": Metric.TOOL_CALLS,
    "model_error": Metric.MODEL_ERRORS,
    "retry_scheduled": Metric.MODEL_RETRIES,
    "notification_failed": Metric.NOTIFICATION_FAILURES,
    "sweep_handed_on": Metric.TURNS_RECOVERED,
}
"""Audit event type -> the metric one such event adds 1 to."""


class Signal(NamedTuple):
    """One value of one metric, with its dimensions (``agent`` and those of :data:`EXTRA`).

    (A NamedTuple, not a frozen dataclass: this module is on every handler's import path, see
    test_cold_start.)
    """

    metric: Metric
    value: float
    dimensions: tuple[tuple[str, str], ...] = ()


def signals(kind: str, event: JsonDict) -> list[Signal]:
    """The metric values one audit event adds (none for most events).

    ``event`` is what the observer gets: the audit event plus ``agent`` / ``tenant`` where known.
    A ``tool_outcome`` whose outcome is ``unknown`` also counts as an UnknownOutcome; a
    ``model_response`` carrying ``usage`` counts its billed tokens (:func:`billed_input`).
    """
    found: list[Signal] = []
    metric = _COUNTED.get(kind)
    if metric is not None:
        found.append(_signal(metric, 1.0, event))
    if kind == "tool_outcome" and event.get("outcome") == "unknown":
        found.append(_signal(Metric.UNKNOWN_OUTCOMES, 1.0, event))
    usage = event.get("usage") if kind == "model_response" else None
    if isinstance(usage, dict) and usage:
        found.append(_signal(Metric.TOKENS_BILLED, billed_input(usage), event))
        found.append(_signal(Metric.OUTPUT_TOKENS, float(_count(usage, "output_tokens")), event))
    return found


def oldest_due(seconds: float) -> Signal:
    """The sweep's gauge: how long the oldest turn it found due had been due (0 when none was)."""
    return Signal(Metric.OLDEST_DUE_SECONDS, max(0.0, float(seconds)))


def billed_input(usage: JsonDict) -> float:
    """Billed input-token equivalents of one model call: input + 1.25 x cache writes + 0.1 x cache reads.

    Cache writes with a one-hour lifetime count twice (``cache_creation.ephemeral_1h_input_tokens``
    where the API breaks them out); the rest of the writes 1.25 times.
    """
    written = _count(usage, "cache_creation_input_tokens")
    split = usage.get("cache_creation")
    hour = _count(split, "ephemeral_1h_input_tokens") if isinstance(split, dict) else 0
    hour = min(hour, written) if written else hour
    rest = max(written - hour, 0)
    read = _count(usage, "cache_read_input_tokens")
    return _count(usage, "input_tokens") + 1.25 * rest + 2.0 * hour + 0.1 * read


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _signal(metric: Metric, value: float, event: JsonDict) -> Signal:
    dims = [("agent", event.get("agent"))] + [(name, event.get(name)) for name in EXTRA.get(metric, ())]
    return Signal(metric, value, tuple((k, str(v)) for k, v in dims if isinstance(v, str) and v))


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
