"""What the application counts: the metric names, and which audit event counts as which.

The core reports events through the runtime's observer (``Runtime.observer(kind, event)``, every
audit event of a landed write, with the turn's ``agent`` and ``tenant`` beside it); the HTTP edge
(:mod:`loopengine.http.observability`) turns them into CloudWatch EMF metrics with :func:`signals`,
so what is counted is exactly what was recorded. Nothing here imports an SDK.

Every metric has the dimension ``service`` (and ``agent`` where a turn is known); :data:`EXTRA`
names the further dimensions some carry (``stopReason``, ``channel``, ``status``). The sweep's
gauge ``OldestDueSeconds`` comes from :class:`~loopengine.app.lifecycle.SweepResult`, not from
an event. :data:`FAILURE_METRICS` are the ones an operator is woken for: template.yaml has an
alarm on each and docs/operations.md a section (tests/test_operations.py checks both).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from loopengine.domain.jsontypes import JsonDict


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


@dataclass(frozen=True, slots=True)
class Signal:
    """One value of one metric, with its dimensions (``agent`` and those of :data:`EXTRA`)."""

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
