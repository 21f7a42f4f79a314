"""A DynamoDB write that landed while its response was lost is recognised as ours, not a conflict.

The fault is botocore's own behaviour under moto, not a patched store: a hook registered on
``before-send`` *after* moto's stubber (so moto has already applied the request) raises a
``ReadTimeoutError`` at the armed write, and botocore's ``standard`` retry sends the very same
request again, as it would after a timeout on AWS (at once: :mod:`tests.dynamodb_faults`).

The flows are discovered, not hard-coded: a fault-free run counts the write requests of
message→pause and of resolve→finish, then each index is faulted in turn and the outcome must be
exactly the fault-free one (the first click is not ``alreadyResolved``, the turn finishes, no
``unknown`` result, no tool ran twice). moto 5 ignores ``ClientRequestToken``, so under moto it is
the write token on the items (``wtok``) that recognises a re-sent transaction.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from loopengine.app.engine import Engine
from loopengine.app.invokers import InlineInvoker
from loopengine.app.request.resolution import Decider
from loopengine.app.runtime import Runtime
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.decisions import Approval
from loopengine.domain.messages import check_protocol
from loopengine.models.scripted import ScriptedModel, call, say, use
from loopengine.stores.dynamodb import create_table, open_dynamodb_stores
from loopengine.stores.dynamodb_table import new_client
from tests.contract.conftest import moto_dynamodb, one_request_at_a_time
from tests.dynamodb_faults import ResponseLost
from tests.harness import Calls, RecordingNotifier, StaticAgents, agent, reports_unknown

pytestmark = pytest.mark.slow  # real processes, seconds per test: make test runs these first

TABLE = "loopengine-idempotency"
WHO = Decider("ops@example.com")
RULES = {"rules": [{"tool": "lookup", "decision": "allow"}], "default_decision": "ask"}
SCRIPT = [call(use("lookup", {"x": 1}, id="l1")), call(use("refund", {"x": 2}, id="r1")), say("Refunded.")]


@dataclass
class Deployment:
    """Engines on DynamoDB (moto) sharing one client, its fault hook and the tools' execution log.

    moto copies a whole table for every transaction, so each trial gets a table of its own
    (:meth:`engine`): the cost of a request stays flat however many trials ran before.
    """

    client: Any
    faults: ResponseLost
    calls: Calls = field(default_factory=Calls)
    numbers: Iterator[int] = field(default_factory=itertools.count)

    def engine(self) -> Engine:
        """An engine on a new table, resuming inline (the resume a resolve hands on runs at once)."""
        table = f"{TABLE}-{next(self.numbers)}"
        create_table(self.client, table)
        model = ScriptedModel.from_list(SCRIPT)
        notifier = RecordingNotifier()
        invoker = InlineInvoker()
        rt = Runtime(
            stores=open_dynamodb_stores(table, FakeClock(), client=self.client),
            agents=StaticAgents(agent("shop", [self.calls.tool("lookup"), self.calls.tool("refund")], RULES)),
            model_for=lambda _c: model,
            notifier_for=lambda _c: notifier,
            invoker=invoker,
            public_url="http://test.invalid",
        )
        engine = Engine(rt)
        invoker.resume = engine.resume
        return engine

    def ran(self) -> Counter[str]:
        """How many times each tool ran so far."""
        return Counter(name for name, _ in self.calls.log)


@contextmanager
def deployment(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    """Engines on moto through a production-configured client (standard retries, 5 attempts)."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with moto_dynamodb(TABLE):
        client = one_request_at_a_time(new_client())
        yield Deployment(client, ResponseLost(client))


SESSION = "ses_idempotency"
Seen = dict[str, Any]
Flow = Callable[[Engine], Seen]


def observe(engine: Engine) -> Seen:
    """What a flow is judged on: the turn, its open items and its stored history."""
    (turn,) = engine.rt.stores.turns.session_turns(SESSION)
    history = engine.rt.stores.sessions.load(SESSION)
    check_protocol(history)
    results = [r for m in history for r in m.tool_results]
    return {
        "status": turn.status.value,
        "stop": turn.stop_reason.value if turn.stop_reason else None,
        "open items": len(engine.outcome(turn.turn_id).pending),
        "shape": [(m.role, tuple(u.name for u in m.tool_uses), len(m.tool_results)) for m in history],
        "unknown": sum(reports_unknown(r.content) for r in results),
    }


def message(engine: Engine) -> Seen:
    """message→pause: lookup runs (allowed), refund waits for approval."""
    engine.send_message("shop", "Please refund order 1.", session_id=SESSION)
    return {}


def resolve(engine: Engine) -> Seen:
    """resolve→finish: approve the refund (the first click); the turn resumes and finishes."""
    (turn,) = engine.rt.stores.turns.session_turns(SESSION)
    (item,) = engine.outcome(turn.turn_id).pending
    first_click = engine.resolve(item.pending_id, Approval(), WHO)
    return {"first click": "alreadyResolved" if first_click.already_resolved else "accepted"}


def run(d: Deployment, flows: list[Flow], index: int | None = None) -> tuple[Seen, list[str]]:
    """On a new table, run ``flows`` with write ``index`` of the last one faulted.

    Returns the observed outcome (with the tools each ran, and any exception) and the write
    operations the last flow sent.
    """
    engine = d.engine()
    *setup, flow = flows
    for step in setup:
        step(engine)
    before = d.ran()
    d.faults.arm(index)
    try:
        seen = flow(engine)
    except Exception as exc:  # the outcome under test: any escape is a failure to report
        seen = {"raised": f"{type(exc).__name__}: {exc}"}
    finally:
        sent, fired = list(d.faults.sent), list(d.faults.fired)
        d.faults.arm(None)
    assert index is None or fired, f"write {index} was never sent"
    return {**seen, **observe(engine), "ran": dict(d.ran() - before)}, sent


def matrix(d: Deployment) -> list[tuple[str, int, str, str]]:
    """Every write of both flows faulted once, in turn: (flow, index, operation, verdict)."""
    rows: list[tuple[str, int, str, str]] = []
    flows: dict[str, list[Flow]] = {"message→pause": [message], "resolve→finish": [message, resolve]}
    for name, steps in flows.items():
        reference, writes = run(d, steps)
        assert "raised" not in reference, reference
        for index, operation in enumerate(writes):
            seen, _ = run(d, steps, index)
            verdict = "ok" if seen == reference else f"DIFFERS: {_difference(reference, seen)}"
            rows.append((name, index, operation, verdict))
    return rows


def _difference(reference: Seen, seen: Seen) -> str:
    keys = [k for k in sorted(set(reference) | set(seen)) if seen.get(k) != reference.get(k)]
    return "; ".join(f"{k}={seen.get(k)!r} (not {reference.get(k)!r})" for k in keys)


def test_a_lost_response_at_any_write_of_either_flow_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    with deployment(monkeypatch) as d:
        rows = matrix(d)
    print("\nflow            write  operation           outcome")
    for name, index, operation, verdict in rows:
        print(f"{name:<15} {index:>5}  {operation:<18}  {verdict}")
    assert {name for name, *_ in rows} == {"message→pause", "resolve→finish"}
    failed = [row for row in rows if row[3] != "ok"]
    assert not failed, f"{len(failed)} of {len(rows)} faulted writes changed the outcome: {failed}"


def test_many_sessions_with_lost_responses_all_come_to_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """20 sessions on 5 threads, one write in 8 answered by a lost response: every turn finishes.

    Sessions share a table in fives (moto's cost grows with the table) and start in turn on four
    tables, so two threads at a time meet on one table and its shared config snapshot item.
    """
    sessions, threads = 20, 5  # (each write's fault alone: the test above; here they meet on threads)
    with deployment(monkeypatch) as d:
        engines = [d.engine() for _ in range(sessions // threads)]
        work = [(engines[i % len(engines)], f"ses_load{i:04d}") for i in range(sessions)]

        def one(job: tuple[Engine, str]) -> Seen:
            engine, session_id = job
            out = engine.send_message("shop", "Please refund order 1.", session_id=session_id)
            (item,) = out.pending
            click = engine.resolve(item.pending_id, Approval(), WHO)
            history = engine.rt.stores.sessions.load(session_id)
            check_protocol(history)
            results = [r for m in history for r in m.tool_results]
            return {
                "first click": "alreadyResolved" if click.already_resolved else "accepted",
                "status": engine.turn(out.turn_id).status.value,
                "unknown": sum(reports_unknown(r.content) for r in results),
            }

        d.faults.arm(rate=1 / 8)
        with ThreadPoolExecutor(max_workers=threads) as pool:
            outcomes = list(pool.map(one, work))
        fired = len(d.faults.fired)

    assert fired > sessions, f"only {fired} faults were injected"
    expected = {"first click": "accepted", "status": "finished", "unknown": 0}
    assert [o for o in outcomes if o != expected] == []
    assert d.ran() == Counter(lookup=sessions, refund=sessions)
