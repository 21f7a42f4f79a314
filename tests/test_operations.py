"""Running it at 3 a.m.: every failure signal is emitted, alarmed on, and has a runbook section.

The metric names come from the code: :class:`loopengine.http.observability.Metric` is the one list, the
source is scanned so no metric is emitted under another name, and a scenario through the real
handlers (api, resume, schedule) shows each failure metric leaving as CloudWatch EMF with the
dimensions DESIGN.md names. template.yaml must hold an alarm for each failure metric, for each
dead-letter queue, for each function's errors and throttles and for the table's throttling, all
notifying the one alarm topic an address can subscribe to; docs/operations.md a section for each.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

import loopengine
from loopengine.app import faults
from loopengine.app.ports import ModelRequest, ModelResponse
from loopengine.domain.base.errors import FatalModelError, RetryableModelError
from loopengine.http import api, observability
from loopengine.http.functions import resume, schedule
from loopengine.http.observability import EXTRA, FAILURE_METRICS, Metric, signals
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.handler_support import FakeContext, lambda_context, load_event, with_body
from tests.handler_support import call as http
from tests.harness import Build, Calls, agent

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(loopengine.__file__).parent
RUNBOOK = ROOT / "docs" / "operations.md"
TOPIC = {"Fn::If": ["HasAlarmTopicArn", {"Ref": "AlarmTopicArn"}, {"Ref": "AlarmTopic"}]}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    found: dict[str, Any] = yaml_parse((ROOT / "template.yaml").read_text())
    return found


def alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        k: v["Properties"] for k, v in template["Resources"].items() if v["Type"] == "AWS::CloudWatch::Alarm"
    }


def watched(alarm: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(namespace, metric, dimensions) of every metric an alarm reads (plain or metric math)."""
    if "MetricName" in alarm:
        return [
            (alarm["Namespace"], alarm["MetricName"], {d["Name"]: d["Value"] for d in alarm["Dimensions"]})
        ]
    stats = [m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m]
    return [
        (m["Namespace"], m["MetricName"], {d["Name"]: d["Value"] for d in m["Dimensions"]}) for m in stats
    ]


def anchors() -> dict[str, str]:
    """docs/operations.md's ``## `` sections by their anchor."""
    found = re.findall(r"^## (.+)$", RUNBOOK.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower().replace("`", "")).replace(" ", "-"): h for h in found}


# -- the names come from the code -------------------------------------------------------------------


def test_every_metric_is_emitted_by_the_code_and_nothing_else_is() -> None:
    used: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "Metric"
            ):
                used.add(node.attr)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in (
                "add_metric",
                "single_metric",
            ):
                name = next((k.value for k in node.keywords if k.arg == "name"), None)
                assert not isinstance(name, ast.Constant), f"{path}: a metric named outside Metric"
    # each member is referenced outside its own definition (the event table, the sweep's gauge)
    assert used >= {m.name for m in Metric}, sorted({m.name for m in Metric} - used)
    assert {Metric.UNKNOWN_OUTCOMES, Metric.MODEL_ERRORS, Metric.OLDEST_DUE_SECONDS} <= FAILURE_METRICS


def test_billed_tokens_count_cache_writes_and_reads_at_their_price() -> None:
    usage = {
        "input_tokens": 100,
        "output_tokens": 40,
        "cache_creation_input_tokens": 1000,
        "cache_read_input_tokens": 5000,
        "cache_creation": {"ephemeral_1h_input_tokens": 200, "ephemeral_5m_input_tokens": 800},
    }
    found = {s.metric: s for s in signals("model_response", {"agent": "a", "tenant": "acme", "usage": usage})}
    assert found[Metric.TOKENS_BILLED].value == 100 + 1.25 * 800 + 2 * 200 + 0.1 * 5000
    assert found[Metric.OUTPUT_TOKENS].value == 40
    assert dict(found[Metric.TOKENS_BILLED].dimensions) == {"agent": "a", "tenant": "acme"}
    assert signals("model_response", {"agent": "a"}) == []  # no usage recorded: nothing billed


# -- the template: alarms, topic, dashboard ---------------------------------------------------------


def test_each_failure_metric_has_an_alarm_and_a_runbook_section(template: dict[str, Any]) -> None:
    sections = anchors()
    for metric in FAILURE_METRICS:
        found = [
            props
            for props in alarms(template).values()
            if ("loopengine", metric.value, {"service": "loopengine"}) in watched(props)
        ]
        assert found, f"no alarm on {metric.value}"
        anchor = metric.value.lower()
        assert anchor in sections, f"docs/operations.md has no section '## {metric.value}'"
        assert any(f"docs/operations.md#{anchor}" in str(a["AlarmDescription"]) for a in found), metric


def test_every_alarm_notifies_the_topic_and_names_its_runbook_section(template: dict[str, Any]) -> None:
    sections = anchors()
    for name, props in alarms(template).items():
        assert props["AlarmActions"] == [TOPIC], name
        linked = re.findall(r"docs/operations\.md#([\w-]+)", str(props["AlarmDescription"]))
        assert linked and set(linked) <= set(sections), f"{name}: runbook anchor {linked}"
    parameters, resources = template["Parameters"], template["Resources"]
    assert parameters["AlarmEmail"]["Default"] == ""
    subscription = resources["AlarmEmailSubscription"]
    assert subscription["Condition"] == "HasAlarmEmail"
    assert subscription["Properties"] == {
        "Protocol": "email",
        "Endpoint": {"Ref": "AlarmEmail"},
        "TopicArn": TOPIC,
    }
    assert template["Conditions"]["HasAlarmEmail"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmEmail"}, ""]}]
    }
    assert resources["AlarmTopic"]["Type"] == "AWS::SNS::Topic"


def dead_letter_queues(template: dict[str, Any]) -> set[str]:
    """Every queue a function's failed asynchronous invocations go to."""
    text = json.dumps(template["Resources"])
    on_failure = re.findall(r'"OnFailure": \{[^{}]*"Destination": \{"Fn::GetAtt": \["(\w+)", "Arn"\]\}', text)
    configs = re.findall(
        r'"DeadLetterQueue": \{[^{}]*"TargetArn": \{"Fn::GetAtt": \["(\w+)", "Arn"\]\}', text
    )
    return set(on_failure) | set(configs)


def test_every_dead_letter_queue_function_and_table_is_watched(template: dict[str, Any]) -> None:
    watched_all = [w for props in alarms(template).values() for w in watched(props)]
    queues = dead_letter_queues(template)
    assert queues == {"FailureQueue"}
    for queue in queues:
        assert (
            "AWS/SQS",
            "ApproximateNumberOfMessagesVisible",
            {"QueueName": {"Fn::GetAtt": [queue, "QueueName"]}},
        ) in watched_all
    functions = [k for k, v in template["Resources"].items() if v["Type"] == "AWS::Serverless::Function"]
    assert len(functions) == 3
    for function in functions:
        for metric in ("Errors", "Throttles"):
            assert ("AWS/Lambda", metric, {"FunctionName": {"Ref": function}}) in watched_all, (
                function,
                metric,
            )
    tables = [k for k, v in template["Resources"].items() if v["Type"] == "AWS::DynamoDB::Table"]
    for table in tables:
        for metric in ("ReadThrottleEvents", "WriteThrottleEvents"):
            assert ("AWS/DynamoDB", metric, {"TableName": {"Ref": table}}) in watched_all, (table, metric)


def test_a_stuck_turn_alarms_within_a_few_sweep_periods(template: dict[str, Any]) -> None:
    parameters = template["Parameters"]
    sweep = re.fullmatch(r"rate\((\d+) minutes?\)", parameters["SweepSchedule"]["Default"])
    assert sweep is not None
    period = int(sweep.group(1)) * 60
    stuck = int(parameters["StuckTurnSeconds"]["Default"])
    assert 3 * period <= stuck <= 10 * period
    [props] = [p for p in alarms(template).values() if p.get("MetricName") == "OldestDueSeconds"]
    assert props["Threshold"] == {"Ref": "StuckTurnSeconds"} and props["Statistic"] == "Maximum"
    # told within minutes: the alarm decides within its evaluation window past the threshold
    assert props["Period"] * props["EvaluationPeriods"] <= 10 * 60
    assert props["InsufficientDataActions"] == [TOPIC]  # a sweep that stops reporting is news too


def test_one_dashboard_shows_every_metric(template: dict[str, Any]) -> None:
    [dashboard] = [v for v in template["Resources"].values() if v["Type"] == "AWS::CloudWatch::Dashboard"]
    body = dashboard["Properties"]["DashboardBody"]["Fn::Sub"]
    json.loads(re.sub(r"\$\{[^}]+\}", "1", body))
    for metric in Metric:
        assert f'"{metric.value}"' in body or f'\\"{metric.value}\\"' in body, metric
    for latency in ('"Latency"', '"Duration"'):
        assert latency in body


# -- the metrics leave the handlers as EMF ---------------------------------------------------------


class Flaky:
    """The scripted model of ``shop``; any message about an outage fails as the model API would."""

    def __init__(self) -> None:
        self.script = ScriptedModel.from_list([call(use("refund", {"x": 1})), say("refunded")])
        self.fatal = False

    def create(self, request: ModelRequest) -> ModelResponse:
        if any("outage" in m.text for m in request.messages if m.role == "user" and m.text):
            raise FatalModelError("invalid x-api-key") if self.fatal else RetryableModelError("overloaded")
        return self.script.create(request)


def emitted(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    docs = []
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            docs.append(json.loads(line))
    return docs


def values(docs: list[dict[str, Any]], metric: Metric) -> list[tuple[float, dict[str, str], list[list[str]]]]:
    found = []
    for doc in docs:
        [spec] = doc["_aws"]["CloudWatchMetrics"]
        if any(m["Name"] == metric.value for m in spec["Metrics"]):
            dims = {k: doc[k] for ds in spec["Dimensions"] for k in ds}
            assert spec["Namespace"] == "loopengine" and spec["Dimensions"][0] == ["service"]
            found.append(
                (
                    sum(doc[metric.value]) if isinstance(doc[metric.value], list) else doc[metric.value],
                    dims,
                    spec["Dimensions"],
                )
            )
    return found


def test_each_failure_signal_leaves_the_handlers_as_emf(
    install_harness: Build, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = Calls()
    shop = agent(
        "shop",
        [calls.tool("refund")],
        {"rules": [{"tool": "refund", "decision": "ask"}], "default_decision": "allow"},
        notifier={"channel": "slack", "config": {"channel": "#refunds"}},
    )
    model = Flaky()
    h = install_harness(shop, model=model, inline=False)
    h.notifier.fail = True  # Slack is down
    h.rt.observer = observability.observe  # as root.build wires it
    capsys.readouterr()

    # a turn pauses (its approval cannot be sent), is approved, and its resume dies mid-call
    status, paused = http(
        api.handler,
        with_body(load_event("post_message", **{"customer-service": "shop"}), {"message": "refund"}),
    )
    assert status == 202, paused
    event = load_event("resolve_approve", pendingId=paused["pendingItems"][0]["pendingId"])
    assert http(api.handler, event)[0] == 202

    def die_after_the_tool(point: str) -> None:
        if point == "tool_returned":
            raise KeyboardInterrupt

    with faults.inject(die_after_the_tool), pytest.raises(KeyboardInterrupt):
        resume.handler(load_event("resume", turnId=paused["turnId"]), lambda_context(FakeContext()))
    # a model outage: one turn waits for its retry, a second one fails for good
    outage = with_body(load_event("post_message", **{"customer-service": "shop"}), {"message": "outage"})
    assert http(api.handler, outage)[1]["status"] == "retrying"
    model.fatal = True
    assert http(api.handler, outage)[1]["stopReason"] == "error"

    # ten minutes later the sweep finds the dead runner's turn, and the resume reports the call unknown
    h.clock.advance(600)
    h.invoker.invoked.clear()  # type: ignore[attr-defined]
    assert schedule.handler({"action": "sweep"}, lambda_context(FakeContext()))["recovered"] >= 1
    assert paused["turnId"] in h.invoker.invoked  # type: ignore[attr-defined]
    resume.handler(load_event("resume", turnId=paused["turnId"]), lambda_context(FakeContext()))
    assert calls.count("refund") == 1

    docs = emitted(capsys)
    names = {m["Name"] for d in docs for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert names <= {m.value for m in Metric}
    assert names >= {m.value for m in FAILURE_METRICS} | {
        "TurnsStarted",
        "TurnsPaused",
        "Decisions",
        "TurnsResumed",
        "TurnsFinished",
    }
    [(unknown, dims, _)] = values(docs, Metric.UNKNOWN_OUTCOMES)
    assert unknown == 1 and dims == {"service": "loopengine", "agent": "shop"}
    failures = values(docs, Metric.NOTIFICATION_FAILURES)
    assert failures and all(
        d == {"service": "loopengine", "agent": "shop", "channel": "slack"} for _, d, _ in failures
    )
    assert ["service", "channel"] in failures[0][2] and ["service", "agent", "channel"] in failures[0][2]
    finished = {d["stopReason"]: v for v, d, _ in values(docs, Metric.TURNS_FINISHED)}
    assert finished == {"error": 1, "end_turn": 1}
    assert sum(v for v, _, _ in values(docs, Metric.MODEL_RETRIES)) == 1
    assert sum(v for v, _, _ in values(docs, Metric.MODEL_ERRORS)) == 2
    recovered = values(docs, Metric.TURNS_RECOVERED)
    assert {d["status"] for _, d, _ in recovered} >= {"running"}
    [(oldest, dims, sets)] = values(docs, Metric.OLDEST_DUE_SECONDS)
    assert oldest >= 500 and sets == [["service"]]
    for metric, extra in EXTRA.items():
        for _, dims, _ in values(docs, metric):
            assert set(dims) <= {"service", "agent", *extra}
