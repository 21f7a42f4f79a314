"""Benchmarks (not timed tests): cold-start imports, per-turn overhead, store requests per step.

Run with ``make bench``. Prints medians over repeated runs; nothing here asserts a time.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.harness import Calls, StaticAgents, agent  # noqa: E402

from loopengine.app.engine import Engine  # noqa: E402
from loopengine.app.invokers import InlineInvoker  # noqa: E402
from loopengine.app.resolution import Decider  # noqa: E402
from loopengine.app.runtime import Runtime  # noqa: E402
from loopengine.domain.clock import SystemClock  # noqa: E402
from loopengine.models.scripted import ScriptedModel  # noqa: E402
from loopengine.stores.sqlite import open_sqlite_stores  # noqa: E402

PROBE = """
import sys, time
t = time.perf_counter()
import {module}
dt = time.perf_counter() - t
heavy = [m for m in ("anthropic", "boto3", "httpx", "jsonschema", "aws_xray_sdk") if m in sys.modules]
print(dt, ",".join(heavy))
"""


def cold_import(module: str, runs: int = 5) -> tuple[float, str]:
    times, heavy = [], ""
    env = {**os.environ, "POWERTOOLS_TRACE_DISABLED": "true"}
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(module=module)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout.split()
        times.append(float(out[0]))
        heavy = out[1] if len(out) > 1 else "-"
    return statistics.median(times), heavy


def pause_resolve(runs: int = 30) -> tuple[float, float]:
    from loopengine.models.scripted import call, say, use

    calls = Calls()
    cfg = agent(
        "bench",
        [calls.tool("lookup"), calls.tool("refund")],
        {"rules": [{"tool": "lookup", "decision": "allow"}], "default_decision": "ask"},
    )
    model = ScriptedModel.from_list([call(use("lookup", {"x": 1}), use("refund", {"x": 2})), say("done")])
    pauses, resolves = [], []
    with tempfile.TemporaryDirectory() as tmp:
        stores = open_sqlite_stores(str(Path(tmp) / "bench.db"), SystemClock())
        invoker = InlineInvoker()
        engine = Engine(Runtime(stores, StaticAgents(cfg), lambda _c: model, lambda _c: None, invoker))
        invoker.resume = engine.resume
        for _ in range(runs):
            t = time.perf_counter()
            out = engine.send_message("bench", "go")
            pauses.append(time.perf_counter() - t)
            t = time.perf_counter()
            engine.resolve(out.pending[0].pending_id, "approve", Decider("bench"))
            resolves.append(time.perf_counter() - t)
        stores.close()
    return statistics.median(pauses), statistics.median(resolves)


def main() -> None:
    print("loopengine benchmarks (medians)")
    print("\n-- cold start: importing a handler module in a fresh interpreter --")
    base, _ = cold_import("json")
    for module in ("handlers.api", "handlers.resume", "loopengine.app.engine", "anthropic"):
        dt, heavy = cold_import(module)
        print(f"  import {module:<20} {dt * 1000:7.1f} ms   heavy modules loaded: {heavy or '-'}")
    print(f"  (baseline interpreter import of json: {base * 1000:.1f} ms)")
    print("\n-- per-turn overhead on SQLite (scripted model, no network) --")
    pause, resolve = pause_resolve()
    print(f"  message -> pause (1 allowed call + 1 pending): {pause * 1000:.2f} ms")
    print(f"  resolve -> run tool -> resume -> finish:       {resolve * 1000:.2f} ms")
    try:
        from bench.dynamodb_requests import requests_per_step
    except ImportError:
        return
    print("\n-- DynamoDB requests per step (moto) --")
    for step, row in requests_per_step().items():
        split = (
            f" (resolve {row['resolve part']} + resume {row['resume part']})" if "resume part" in row else ""
        )
        ops = ", ".join(f"{k} {v}" for k, v in sorted(row["by_operation"].items()))
        print(f"  {row['total']:3d} requests{split:<28} {step}\n      {ops}")


if __name__ == "__main__":
    main()
