"""The common scenario on loopengine's DynamoDB store (moto), metered phase by phase.

The scenario (issue 13, "the bench"): a message makes the model ask, in one answer, for the allowed
``lookup_order`` (it runs) and the gated ``issue_refund`` (it pends: the turn pauses); a human
approves it (resolve), which resumes the turn: the refund runs and the model ends with text. The agent is the
bench-only ``refund-cycle`` (bench/agents/refund_cycle/: customer-service's two tools and gate, a
script answering both calls, then text); the Engine is the one a deployment builds
(``build_runtime`` on ``open_dynamodb_stores``), every request of its client metered by
:class:`bench.meter.Meter`. bench/peers/langgraph_cycle.py runs the same scenario on LangGraph.

``common_cycle(session_id=None, bench=None)`` returns (keys stable: tests and bench/peers/run.py
read them)::

    {
      "phases": {                       # each a Meter.report() of that phase
        "message -> pause":  {"requests", "by_operation", "items_read", "rru", "wru",
                              "index_wru", "partition_wru"},
        "resolve":           {...},     # the resolve request (last item) up to handing on the resume
        "resume -> finish":  {...},     # the resume the resolve hands on, to the turn's end
      },
      "totals": {"requests", "by_operation", "items_read", "rru", "wru", "index_wru"},
      "bytes_per_pause": int,           # bytes the paused state added to the table (items' billed size)
      "tool_runs": {"lookup_order": 1, "issue_refund": 1},   # tool bodies run in the cycle
      "session": str, "turn": str,
    }

Without ``bench`` the cycle runs on a fresh table after one warm-up cycle in another session (a
steady state: the agent's config snapshot is already stored, as on a running deployment).
``growth()`` meters the cycle in a session with 1 + 0 / 10 / 50 / 200 earlier finished turns;
``partition_rates()`` is scripts/partition_rate.py's table for a metered cycle.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the bench agent's tools import bench.effects
    sys.path.insert(0, str(ROOT))


from bench.dynamodb_requests import TABLE as TABLE  # noqa: E402 (TABLE: for callers)
from bench.dynamodb_requests import PhaseInvoker, metered_stack  # noqa: E402
from bench.effects import RUNS  # noqa: E402
from bench.meter import Meter  # noqa: E402
from loopengine.app.engine import Engine  # noqa: E402
from loopengine.app.request.resolution import Decider  # noqa: E402
from loopengine.authoring.registry import AgentRegistry  # noqa: E402
from loopengine.domain.base.ids import new_id  # noqa: E402
from loopengine.domain.decisions import Approval  # noqa: E402
from loopengine.domain.turns import TurnStatus  # noqa: E402

AGENT = "refund-cycle"
AGENTS_DIR = Path(__file__).resolve().parent / "agents"
MESSAGE = "Order A-1001 arrived broken, please refund it."
"""The user's message (the LangGraph side sends the same)."""
WHO = Decider("bench@example.com")
PHASES = ("message -> pause", "resolve", "resume -> finish")
GROWTH = (0, 10, 50, 200)
RATES = (100.0, 1000.0)
"""Cycles a second for the partition-rate table."""


@dataclass
class Bench:
    """A metered Engine on a moto table: what one or more cycles run on."""

    engine: Engine
    meter: Meter
    invoker: PhaseInvoker
    client: Any
    """The metered boto3 DynamoDB client the stores use."""


@contextmanager
def scenario_engine() -> Iterator[Bench]:
    """The deployment's Engine (scripted model, the ``refund-cycle`` agent) on a fresh moto table."""
    with metered_stack(AgentRegistry(paths=[AGENTS_DIR])) as (engine, meter, invoker, client):
        yield Bench(engine, meter, invoker, client)


def stored_bytes(meter: Meter) -> int:
    """Bytes of every item the metered client wrote and has not deleted (DynamoDB's billed sizes)."""
    return sum(meter.sizes.values())


def run_cycle(bench: Bench, session_id: str | None = None) -> dict[str, Any]:
    """One cycle in ``session_id`` (a new session if None), metered phase by phase (module docstring)."""
    engine, meter, invoker = bench.engine, bench.meter, bench.invoker
    phases: dict[str, Any] = {}
    RUNS.clear()
    before = stored_bytes(meter)
    meter.clear()
    out = engine.send_message(AGENT, MESSAGE, session_id=session_id)
    phases["message -> pause"] = meter.report()
    paused = stored_bytes(meter) - before
    if out.status is not TurnStatus.PAUSED or [p.tool for p in out.pending] != ["issue_refund"]:
        raise AssertionError(f"expected a pause on issue_refund, got {out.status} {out.pending}")
    pending = engine.outcome(out.turn_id).pending[0].pending_id
    invoker.resolve_part = None
    meter.clear()
    engine.resolve(pending, Approval(), WHO)
    if invoker.resolve_part is None:
        raise AssertionError("approving the last item handed on no resume")
    phases["resolve"] = invoker.resolve_part
    phases["resume -> finish"] = meter.report()
    if engine.turn(out.turn_id).status is not TurnStatus.FINISHED:
        raise AssertionError(f"the turn did not finish: {engine.turn(out.turn_id).status}")
    return {
        "phases": phases,
        "totals": totals(phases),
        "bytes_per_pause": paused,
        "tool_runs": dict(sorted(RUNS.items())),
        "session": out.session_id,
        "turn": out.turn_id,
    }


def totals(phases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The phases' figures added up (requests by operation, items, units, index units)."""
    ops: Counter[str] = Counter()
    index: Counter[str] = Counter()
    for phase in phases.values():
        ops.update(phase["by_operation"])
        index.update(phase["index_wru"])
    return {
        "requests": sum(p["requests"] for p in phases.values()),
        "by_operation": dict(sorted(ops.items())),
        "items_read": sum(p["items_read"] for p in phases.values()),
        "rru": sum(p["rru"] for p in phases.values()),
        "wru": sum(p["wru"] for p in phases.values()),
        "index_wru": dict(sorted(index.items())),
    }


def common_cycle(session_id: str | None = None, bench: Bench | None = None) -> dict[str, Any]:
    """The common scenario's cycle, metered (module docstring); a fresh, warmed-up table if no ``bench``."""
    if bench is not None:
        return run_cycle(bench, session_id)
    with scenario_engine() as fresh:
        run_cycle(fresh)  # warm-up: stores the agent's config snapshot
        return run_cycle(fresh, session_id)


def with_earlier(bench: Bench, count: int) -> str:
    """A session holding one finished cycle plus ``count`` more finished turns (copies of it)."""
    first = run_cycle(bench)
    turns = bench.engine.rt.stores.turns
    (done,) = turns.session_turns(first["session"])
    for index in range(count):
        copy = dataclasses.replace(
            done, turn_id=new_id("trn_"), created_at=done.created_at - 1 - index, version=0
        )
        turns.create_turn(copy)
    return str(first["session"])


def growth(counts: Sequence[int] = GROWTH) -> dict[str, Any]:
    """The cycle's figures in a session with 1 + N earlier finished turns, for each N in ``counts``."""
    out: dict[str, Any] = {}
    for count in counts:
        with scenario_engine() as bench:
            session = with_earlier(bench, count)
            cycle = run_cycle(bench, session)
        out[str(count)] = {
            name: {k: phase[k] for k in ("requests", "items_read", "rru", "wru")}
            for name, phase in cycle["phases"].items()
        }
    return out


def _partition_rate() -> Any:
    path = ROOT / "scripts" / "partition_rate.py"
    spec = importlib.util.spec_from_file_location("partition_rate", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("partition_rate", module)
    spec.loader.exec_module(module)
    return module


def partition_rates(
    cycle: dict[str, Any], rates: Sequence[float] = RATES, top: int = 3
) -> list[dict[str, Any]]:
    """The busiest partitions at each rate (cycles a second), from ``cycle``'s metered phases."""
    rate = _partition_rate()
    rows = []
    for per_second in rates:
        for row in rate.load(cycle["phases"], per_second)[:top]:
            rows.append({"rate": per_second, **dataclasses.asdict(row)})
    return rows


if __name__ == "__main__":
    import json

    cycle = common_cycle()
    print(json.dumps({"cycle": cycle, "growth": growth(), "partitions": partition_rates(cycle)}, indent=2))
