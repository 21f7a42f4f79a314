"""The DynamoDB store-fault matrix of the resolve path (issue 28): every request k x every fault kind.

The path: a refund waits for approval (the allowed lookup ran when the message came), a person
approves it (``Engine.resolve``, what the approve ``POST`` runs), Lambda's async invoke delivers the
resume, the refund runs, the model asks for an email (approval again: the chained pause), the
person approves that, the email runs and the model's final answer finishes the turn. A fault-free run numbers
the DynamoDB requests of that path (N); then each request k is faulted with each kind of
:data:`tests.dynamodb_faults.KINDS` (throttled past botocore's retries, a connection that never
reaches DynamoDB on every attempt, throttled once, applied with its response lost), through
botocore's public event hooks on a production-configured client (5 attempts, ``standard`` retries).

Recovery only through the product's own mechanisms: a person clicks again after an error, Lambda
redelivers a failed async resume twice, the sweep runs once the clock passes the lease. Every cell:
the turn finishes (``end_turn``, or an honest stop), the tool protocol is whole, the refund ran at
most once, and a call reported ``unknown`` is one whose body ran (the goal: no cell reports
``unknown`` for a call that never started). The matrix is printed (``pytest -s``); its figures are
in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from loopengine.app.engine import Engine
from loopengine.app.request.resolution import Decider
from loopengine.app.runtime import Runtime
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.decisions import Approval
from loopengine.domain.messages import check_protocol
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from loopengine.stores.dynamodb import create_table, open_dynamodb_stores
from loopengine.stores.dynamodb_table import new_client
from tests.contract.conftest import moto_dynamodb, one_request_at_a_time
from tests.dynamodb_faults import ATTEMPTS, KINDS, WRITES, RequestFault
from tests.harness import Calls, LambdaAsync, RecordingNotifier, StaticAgents, agent, reports_unknown

pytestmark = pytest.mark.slow(seconds=8)  # one kind per test (about 6 s of CPU): xdist spreads the four
# (no xdist_group: the kinds share nothing but the module's moto backend, which each worker makes once)

TABLE = "loopengine-store-faults"
SESSION = "ses_faults"
WHO = Decider("ops@example.com")
RULES = {"rules": [{"tool": "lookup", "decision": "allow"}], "default_decision": "ask"}
SCRIPT = [
    call(use("lookup", {"x": 1}, id="l1")),
    call(use("refund", {"x": 2}, id="r1")),
    call(use("email", {"x": 3}, id="e1")),
    say("Refunded, and told the customer."),
]
TOOLS = ("lookup", "refund", "email")
STEP = 61.0
"""How far the clock moves before each sweep: past the 60 s lease and the 60 s hand-off grace."""
HONEST = {StopReason.END_TURN, StopReason.ERROR}
"""How a turn may end: its final answer, or an error it reports (never a silent stall)."""
ATTEMPTED = {"throttled": ATTEMPTS, "lost": ATTEMPTS, "transient": 2, "applied": 2, "ambiguous": ATTEMPTS}
"""botocore's attempts of the faulted request: its retries run out, or its one re-send succeeds."""
MATRIX: dict[str, list[str]] = {}


@dataclass
class Cell:
    """One run of the resolve path on a table of its own, with its own faulty client."""

    engine: Engine
    observer: Engine
    invoker: LambdaAsync
    faults: RequestFault
    calls: Calls
    clock: FakeClock
    turn_id: str


class Deployment:
    """One moto backend; a new table and a new production client (full retry quota) per cell.

    The test reads the outcome through a client without faults (``observer``), so its own reads
    are not requests of the path.
    """

    def __init__(self) -> None:
        self.clean = one_request_at_a_time(new_client())
        self.numbers = itertools.count()
        self.path: list[str] = []
        """The fault-free path's DynamoDB requests (:func:`reference`)."""

    def cell(self, message_fault: tuple[int, str] | None = None) -> Cell:
        """A cell whose refund waits for approval; ``message_fault``: (k, kind) while the message runs."""
        table = f"{TABLE}-{next(self.numbers)}"
        create_table(self.clean, table)
        client = one_request_at_a_time(new_client())
        faults, calls, clock, invoker = RequestFault(client), Calls(), FakeClock(), LambdaAsync()
        model = ScriptedModel.from_list(SCRIPT)
        agents = StaticAgents(agent("shop", [calls.tool(n) for n in TOOLS], RULES))

        def runtime(c: Any) -> Runtime:
            return Runtime(
                stores=open_dynamodb_stores(table, clock, client=c),
                agents=agents,
                model_for=lambda _c: model,
                notifier_for=lambda _c: RecordingNotifier(),
                invoker=invoker,
                public_url="http://test.invalid",
            )

        engine, observer = Engine(runtime(client)), Engine(runtime(self.clean))
        if message_fault is None:
            out = engine.send_message("shop", "Please refund order 1.", session_id=SESSION)
            assert out.status is TurnStatus.PAUSED and calls.count("lookup") == 1
            return Cell(engine, observer, invoker, faults, calls, clock, out.turn_id)
        faults.arm(*message_fault)
        with contextlib.suppress(Exception):  # the request failed; what it wrote is the sweep's
            engine.send_message("shop", "Please refund order 1.", session_id=SESSION)
        faults.disarm()
        (turn,) = observer.rt.stores.turns.session_turns(SESSION)
        return Cell(engine, observer, invoker, faults, calls, clock, turn.turn_id)


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_PROFILE"):
            mp.delenv(name, raising=False)
        with moto_dynamodb(TABLE):
            yield Deployment()


def run(cell: Cell) -> list[str]:
    """Approve the refund and let the product's own recovery bring the turn to rest; how it did."""
    how: list[str] = []
    clicked: set[str] = set()  # a person approves each item once, and again only after an error
    for _ in range(16):
        cell.invoker.deliver(cell.engine)
        out = cell.observer.outcome(cell.turn_id)
        if out.status is TurnStatus.FINISHED:
            break
        waiting = [i for i in out.pending if i.pending_id not in clicked]
        if out.status is TurnStatus.PAUSED and waiting:
            (item,) = waiting
            try:
                cell.engine.resolve(item.pending_id, Approval(), WHO)
                clicked.add(item.pending_id)
            except Exception:  # the person saw an error: they click again
                how.append("clicked again")
            continue
        cell.clock.advance(STEP)
        try:
            swept = cell.engine.sweep()
        except Exception:  # the sweep's function failed; the next one runs a minute later
            how.append("sweep failed")
            continue
        if swept.recovered:
            how.append("sweep")
    if cell.invoker.redelivered:
        how.append("redelivery")
    return sorted(set(how))


def verdict(cell: Cell) -> dict[str, Any]:
    """The cell's observed outcome (judged by :func:`problems`)."""
    turn = cell.observer.rt.stores.turns.get_turn(cell.turn_id)
    assert turn is not None
    history = cell.observer.rt.stores.sessions.load(SESSION)
    protocol = "whole"
    try:
        check_protocol(history)
    except Exception as exc:  # judged below
        protocol = f"broken: {exc}"
    names = {u.id: u.name for m in history for u in m.tool_uses}
    unknown = [
        names.get(r.tool_use_id, r.tool_use_id)
        for m in history
        for r in m.tool_results
        if reports_unknown(r.content)
    ]
    seen = {
        "status": turn.status.value,
        "stop": turn.stop_reason.value if turn.stop_reason else None,
        "protocol": protocol,
        "runs": dict(Counter(name for name, _ in cell.calls.log)),
        "unknown": unknown,
    }
    return seen


def problems(seen: dict[str, Any]) -> list[str]:
    """What a cell got wrong (empty: the cell holds every guarantee)."""
    wrong = []
    if seen["status"] != "finished" or StopReason(seen["stop"]) not in HONEST:
        wrong.append(f"turn {seen['status']}/{seen['stop']}")
    if seen["protocol"] != "whole":
        wrong.append(f"protocol {seen['protocol']}")
    if any(n > 1 for n in seen["runs"].values()):
        wrong.append(f"ran twice {seen['runs']}")
    never_ran = [name for name in seen["unknown"] if seen["runs"].get(name, 0) == 0]
    if never_ran:
        wrong.append(f"unknown but never ran: {','.join(never_ran)}")
    return wrong


def reference(deployment: Deployment) -> list[str]:
    """The fault-free path's DynamoDB requests, in order (request k of the matrix is ``[k]``)."""
    if deployment.path:
        return deployment.path
    cell = deployment.cell()
    cell.faults.arm(None)
    how = run(cell)
    requests = list(cell.faults.sent)
    cell.faults.disarm()
    seen = verdict(cell)
    runs = {"lookup": 1, "refund": 1, "email": 1}
    assert (seen["stop"], seen["runs"], seen["unknown"], how) == ("end_turn", runs, [], []), (seen, how)
    deployment.path = requests
    print(f"\nthe resolve path ({len(requests)} DynamoDB requests): {' '.join(requests)}")
    return requests


@pytest.mark.parametrize("kind", KINDS)
def test_every_request_of_the_resolve_path_faulted_leaves_nothing_unknown_that_never_ran(
    deployment: Deployment, kind: str
) -> None:
    requests = reference(deployment)
    assert len(requests) >= 16, requests
    rows, failed = [], []
    for k, operation in enumerate(requests):
        if kind == "ambiguous" and operation not in WRITES:
            continue  # a read whose every answer is lost is, to the reader, a read that never arrived
        cell = deployment.cell()
        cell.faults.arm(k, kind)
        how = run(cell)
        cell.faults.disarm()
        assert cell.faults.attempts == ATTEMPTED[kind], (
            f"request {k} ({operation}): {cell.faults.attempts} attempts"
        )
        seen = verdict(cell)
        wrong = problems(seen)
        outcome = (
            f"{seen['stop']}; runs {seen['runs'].get('refund', 0)}/{seen['runs'].get('email', 0)}; "
            f"unknown {','.join(seen['unknown']) or '-'}; via {', '.join(how) or 'the same path'}"
        )
        rows.append(f"{k:>3} {operation:<18} {'FAIL ' + '; '.join(wrong) if wrong else 'ok'}: {outcome}")
        if wrong:
            failed.append(rows[-1])
    MATRIX[kind] = rows
    assert not failed, f"{len(failed)} of {len(rows)} {kind} cells:\n" + "\n".join(failed)


MESSAGE_WRITES = 6
"""The message path's writes (message, lookup's claim in the model's response, its outcome, the pause,
notification marks): each ambiguous, then the rest of the path runs fault-free."""


def test_an_ambiguous_write_of_the_message_path_leaves_nothing_unknown_that_never_ran(
    deployment: Deployment,
) -> None:
    """The allowed lookup's claim rides in the model's response: a landed write whose every answer was
    lost is settled by reading the claim back, so the lookup runs once instead of ``unknown``."""
    path = deployment.cell((10**6, "ambiguous")).faults.sent  # counted, nothing faulted
    writes = [k for k, operation in enumerate(path) if operation in WRITES]
    failed = []
    for k in writes:
        cell = deployment.cell((k, "ambiguous"))
        assert cell.faults.attempts == ATTEMPTS
        run(cell)
        seen = verdict(cell)
        if problems(seen) or seen["runs"] != {"lookup": 1, "refund": 1, "email": 1}:
            failed.append(f"{k} {path[k]}: {problems(seen)} {seen}")
    assert len(writes) == MESSAGE_WRITES and not failed, (path, failed)


def teardown_module() -> None:
    for kind, rows in MATRIX.items():
        legend = "k, operation, verdict: stop; refund/email runs; unknown; recovered via"
        print(f"\n{kind}: {len(rows)} cells ({legend})")
        for row in rows:
            print("  " + row)
