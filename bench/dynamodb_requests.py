"""DynamoDB requests per step of the customer-service flow, counted under moto.

What a step costs on a deployment's bill and latency is mostly the number of DynamoDB requests it
makes, and that number is deterministic: this counts them by operation (``count_requests`` hooks
the client, one count per API call however many times botocore retried it).

The Engine is the one a deployment builds (``build_runtime`` with the scripted model and the
bundled ``customer-service`` agent) on ``open_dynamodb_stores`` with a counting client. Resumes run
inline, so "resolve (last item)" covers the resolve request plus the resume it hands on; the two
parts are also reported separately (``resolve part`` / ``resume part``), as the api and resume
Lambdas would each pay them.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import boto3
from moto import mock_aws

from bench.meter import Meter, _size  # noqa: F401  (re-exported: their old home)
from loopengine.app.engine import Engine
from loopengine.app.outcome import TurnOutcome
from loopengine.app.request.resolution import Decider, Resolution
from loopengine.authoring.registry import AgentRegistry
from loopengine.bootstrap import build_runtime
from loopengine.domain.base.clock import SystemClock
from loopengine.domain.decisions import Approval, Denial
from loopengine.domain.turns import TurnStatus
from loopengine.stores.dynamodb import count_requests, create_table, open_dynamodb_stores

TABLE = "loopengine-bench"
AGENT = "customer-service"
BROKEN = "Order A-1001 arrived broken, please refund it."
RIGHT_AWAY = "Order A-1001 arrived broken, please refund it right away."
FAKE_AWS = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
WHO = Decider("bench@example.com")


class SplitInvoker:
    """Resume inline, noting the request count when the resume begins (resolve part | resume part)."""

    def __init__(self, counts: Counter[str]) -> None:
        self.counts = counts
        self.engine: Engine | None = None
        self.at_resume: Counter[str] | None = None

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        """Remember where the resolve's requests end, then run the resume here (one code version)."""
        assert self.engine is not None
        self.at_resume = Counter(self.counts)
        self.engine.resume(turn_id)


@contextmanager
def moto_client() -> Iterator[Any]:
    """A boto3 DynamoDB client on a fresh moto table (fake credentials: no real endpoint is reachable)."""
    unset = {k: "" for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_PROFILE")}
    with mock.patch.dict(os.environ, {**unset, **FAKE_AWS}), mock_aws():
        for name in unset:
            os.environ.pop(name, None)
        if not _SESSION:  # one per process: a fresh session's client costs ~150 ms of CPU, this one's ~15
            _SESSION.append(boto3.session.Session(region_name=FAKE_AWS["AWS_DEFAULT_REGION"]))
        client = _SESSION[0].client("dynamodb")
        create_table(client, TABLE)
        yield client


_SESSION: list[Any] = []
"""The boto3 session moto clients come from, made (and its credentials resolved) under FAKE_AWS."""


@contextmanager
def _moto_engine() -> Iterator[tuple[Engine, Counter[str], SplitInvoker]]:
    """The deployment's Engine on a fresh moto table, with the client's requests counted."""
    with moto_client() as client:
        counts = count_requests(client)
        stores = open_dynamodb_stores(TABLE, SystemClock(), client=client)
        invoker = SplitInvoker(counts)
        engine = Engine(build_runtime({"LOOPENGINE_MODEL": "scripted"}, invoker=invoker, stores=stores))
        invoker.engine = engine
        yield engine, counts, invoker


class PhaseInvoker:
    """Resume inline, closing the resolve's phase of ``meter`` first (resolve | resume phases)."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.engine: Engine | None = None
        self.resolve_part: dict[str, Any] | None = None

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        """Note the resolve's figures, then run the resume here (one code version)."""
        assert self.engine is not None
        self.resolve_part = self.meter.report()
        self.meter.clear()
        self.engine.resume(turn_id)


@contextmanager
def metered_stack(
    registry: AgentRegistry | None = None, env: dict[str, str] | None = None
) -> Iterator[tuple[Engine, Meter, PhaseInvoker, Any]]:
    """The deployment's Engine on a fresh moto table, every request metered; and the metered client.

    ``registry``: where its agents come from (default: the deployment's, as ``build_runtime`` finds them);
    ``env``: settings on top of the scripted model (a default webhook, say).
    """
    with moto_client() as client:
        meter = Meter()
        meter.attach(client)
        stores = open_dynamodb_stores(TABLE, SystemClock(), client=client)
        invoker = PhaseInvoker(meter)
        runtime = build_runtime(
            {"LOOPENGINE_MODEL": "scripted", **(env or {})}, invoker=invoker, stores=stores, registry=registry
        )
        engine = Engine(runtime)
        invoker.engine = engine
        yield engine, meter, invoker, client


@contextmanager
def metered_engine() -> Iterator[tuple[Engine, Meter, PhaseInvoker]]:
    """The deployment's Engine on a fresh moto table, every request metered (see :class:`Meter`)."""
    with metered_stack() as (engine, meter, invoker, _client):
        yield engine, meter, invoker


def run_flow(engine: Engine, meter: Meter, invoker: PhaseInvoker, session_id: str | None) -> dict[str, Any]:
    """The common scenario in ``session_id`` (a new one if None), metered phase by phase.

    A message runs the allowed ``lookup_order`` and parks on the gated ``issue_refund``; approving
    it resumes the turn, which parks on ``send_email``; approving that resumes it to the end. One
    such flow is one *cycle* in ``scripts/partition_rate.py``.
    """
    phases: dict[str, Any] = {}
    meter.clear()
    out = engine.send_message(AGENT, BROKEN, session_id=session_id)
    phases["message -> pause"] = meter.report()
    assert out.status is TurnStatus.PAUSED and [p.tool for p in out.pending] == ["issue_refund"]
    for name, then in (("refund", "pause"), ("email", "finish")):
        meter.clear()
        invoker.resolve_part = None
        pending = engine.outcome(out.turn_id).pending[0].pending_id
        meter.clear()
        engine.resolve(pending, Approval(), WHO)
        assert invoker.resolve_part is not None
        phases[f"resolve ({name})"] = invoker.resolve_part
        phases[f"resume -> {then}"] = meter.report()
    assert engine.turn(out.turn_id).status is TurnStatus.FINISHED
    phases["session"] = out.session_id
    return phases


def _report(counts: Counter[str], split: Counter[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"total": counts.total(), "by_operation": dict(sorted(counts.items()))}
    if split is not None:
        out["resolve part"] = split.total()
        out["resume part"] = counts.total() - split.total()
    return out


def requests_per_step() -> dict[str, Any]:
    """DynamoDB requests of each step, by operation and in total."""
    steps: dict[str, Any] = {}
    with _moto_engine() as (engine, counts, invoker):

        def measure(name: str, step: Any, *, split: bool = False) -> Any:
            counts.clear()
            invoker.at_resume = None
            result = step()
            steps[name] = _report(counts, invoker.at_resume if split else None)
            return result

        # one pending item at a time: pause, approve -> resume -> chained pause, approve -> finish
        out: TurnOutcome = measure(
            "message -> pause (lookup_order ran, issue_refund pending)",
            lambda: engine.send_message(AGENT, BROKEN),
        )
        refund = out.pending[0].pending_id
        measure(
            "resolve approve (last item) -> resume -> pause again (send_email)",
            lambda: engine.resolve(refund, Approval(), WHO),
            split=True,
        )
        email = engine.outcome(out.turn_id).pending[0].pending_id
        measure(
            "resolve approve (last item) -> resume -> finish (end_turn)",
            lambda: engine.resolve(email, Approval(), WHO),
            split=True,
        )
        late: Resolution = measure(
            "late click (alreadyResolved)", lambda: engine.resolve(refund, Approval(), WHO)
        )
        assert late.already_resolved

        # two pending items in one batch: a non-last sibling, then the last one
        both: TurnOutcome = measure(
            "message -> pause (issue_refund + send_email pending in one batch)",
            lambda: engine.send_message(AGENT, RIGHT_AWAY),
        )
        first, second = (p.pending_id for p in both.pending)
        sibling: Resolution = measure(
            "resolve approve (non-last sibling)", lambda: engine.resolve(first, Approval(), WHO)
        )
        assert sibling.outstanding == 1
        measure(
            "resolve approve (last sibling) -> resume -> finish (end_turn)",
            lambda: engine.resolve(second, Approval(), WHO),
            split=True,
        )

        # a denial cascade-skips its sibling and finishes without a model call
        denied = engine.send_message(AGENT, RIGHT_AWAY)
        measure(
            "resolve deny (cascade-skip sibling) -> finish (denied)",
            lambda: engine.resolve(denied.pending[0].pending_id, Denial(), WHO),
        )
        assert engine.turn(denied.turn_id).stop_reason == "denied"
    return steps


if __name__ == "__main__":
    import json

    print(json.dumps(requests_per_step(), indent=2))


class _Queued:
    """Lambda's asynchronous invoke as the realistic path meets it: queued, delivered later."""

    def __init__(self) -> None:
        self.turns: list[str] = []

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        """Queue the resume (the resolve's request ends here)."""
        self.turns.append(turn_id)


def realistic_flow(client: Any, webhook_url: str, secret: str) -> dict[str, Any]:
    """Issue 27's realistic path on one table: every phase in a fresh container, a signed webhook per pause.

    Each phase builds its own stores and runtime (nothing cached from the one before: no turn head,
    no config snapshot), as a cold Lambda would; the deployment's default webhook takes every event.
    Phases: the message that pauses on ``issue_refund``; the resolve that approves it (its resume is
    queued); that resume, delivered twice (Lambda's at-least-once), which pauses on ``send_email``.
    Returns each phase's :class:`~bench.meter.Meter` report.
    """
    env = {
        "LOOPENGINE_MODEL": "scripted",
        "LOOPENGINE_DEFAULT_WEBHOOK_URL": webhook_url,
        "LOOPENGINE_DEFAULT_WEBHOOK_SECRET": secret,
    }
    meter = Meter()
    meter.attach(client)
    queued = _Queued()

    def container() -> Engine:
        stores = open_dynamodb_stores(TABLE, SystemClock(), client=client)
        return Engine(build_runtime(env, invoker=queued, stores=stores))

    phases: dict[str, Any] = {}
    container().send_message(AGENT, BROKEN)  # the agent's config snapshot stored: not a cold deploy's cost
    while queued.turns:
        queued.turns.pop()
    meter.clear()
    out = container().send_message(AGENT, BROKEN)
    phases["message -> pause"] = meter.report()
    assert out.status is TurnStatus.PAUSED
    meter.clear()
    container().resolve(out.pending[0].pending_id, Approval(), WHO)
    phases["resolve"] = meter.report()
    meter.clear()
    for turn_id in queued.turns * 2:  # delivered twice
        container().resume(turn_id)
    phases["resume delivered twice -> chained pause"] = meter.report()
    assert container().outcome(out.turn_id).pending[0].tool == "send_email"
    return phases
