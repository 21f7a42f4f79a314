"""Benchmarks (not timed tests): cold-start imports, per-turn overhead, store requests per step.

Run with ``make bench``. Prints medians over repeated runs (and the model bill of a long session,
bench/prompt_cache.py); nothing here asserts a time. The cold-start
part is bench/cold_import.py (each handler against the floor of its own dependencies; its JSON result
goes to bench/results/cold_import.json).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.harness import Calls, StaticAgents, agent  # noqa: E402

from bench import cold_import  # noqa: E402
from loopengine.app.engine import Engine  # noqa: E402
from loopengine.app.invokers import InlineInvoker  # noqa: E402
from loopengine.app.request.resolution import Decider  # noqa: E402
from loopengine.app.runtime import Runtime  # noqa: E402
from loopengine.domain.base.clock import SystemClock  # noqa: E402
from loopengine.domain.decisions import Approval  # noqa: E402
from loopengine.models.scripted import ScriptedModel  # noqa: E402
from loopengine.stores.sqlite import open_sqlite_stores  # noqa: E402

COLD_ROUNDS = 11


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
            engine.resolve(out.pending[0].pending_id, Approval(), Decider("bench"))
            resolves.append(time.perf_counter() - t)
        stores.close()
    return statistics.median(pauses), statistics.median(resolves)


def main() -> None:
    print("loopengine benchmarks (medians)")
    print(f"\n-- cold start: each handler's import against its floor, {COLD_ROUNDS} alternating rounds --")
    results = cold_import.run(COLD_ROUNDS)
    print("  " + cold_import.table(results).replace("\n", "\n  "))
    cold_import.write(results, cold_import.RESULT)
    written = cold_import.RESULT.relative_to(ROOT)
    print(f"  (target <= {cold_import.TARGET}x; written: {written}; see docs/performance.md)")
    print("\n-- per-turn overhead on SQLite (scripted model, no network) --")
    pause, resolve = pause_resolve()
    print(f"  message -> pause (1 allowed call + 1 pending): {pause * 1000:.2f} ms")
    print(f"  resolve -> run tool -> resume -> finish:       {resolve * 1000:.2f} ms")
    print("\n-- the model bill of a long session: billed input-token equivalents per turn --")
    from bench import prompt_cache

    bill = prompt_cache.run()
    prompt_cache.RESULT.write_text(json.dumps(bill, indent=2) + "\n")
    print("  " + prompt_cache.table(bill).replace("\n", "\n  "))
    print(f"  (goal: turn 12 <= {prompt_cache.GOAL} of its prompt; see docs/performance.md)")
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
