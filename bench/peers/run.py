"""loopengine against LangGraph's DynamoDB saver on the common scenario, side by side (``make bench``).

Runs the loopengine side here (bench/scenario.py, the project's environment) and the LangGraph side
in its own environment (bench/peers/venv.py builds ``.venv-peers``; bench/peers/langgraph_cycle.py),
then prints one table: requests per phase by operation, write units by table and index, read units,
bytes per pause, dollars per million cycles at on-demand list prices, re-executed effects, and the
ratio loopengine / LangGraph of each; then how a cycle grows with a session's earlier turns and the
busiest partitions' write rates. The result goes to bench/results/peers.json; each figure is
compared with the previous file there and a change of more than 20% is flagged.

    .venv/bin/python bench/peers/run.py               # both sides, table, write and compare
    .venv/bin/python bench/peers/run.py --no-peers    # loopengine only (no .venv-peers)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.peers import venv  # noqa: E402

PRICE_WRU = 0.625
"""On-demand list price, $ per million write request units."""
PRICE_RRU = 0.125
"""On-demand list price, $ per million read request units."""
DRIFT = 0.20
"""A figure that moved by more than this share since the previous run is flagged."""
RESULT = ROOT / "bench" / "results" / "peers.json"
CYCLE = Path(__file__).resolve().parent / "langgraph_cycle.py"
PHASES = ("message -> pause", "resolve", "resume -> finish")
GROWTH = (0, 10, 50, 200)
SIDES = ("loopengine", "langgraph")

Row = tuple[str, ...]
DASH = "\N{EN DASH}"
"""A cell with no figure (LangGraph has no separate resolve)."""


# -- figures ------------------------------------------------------------------------------------------


def dollars(cycle: dict[str, Any]) -> float:
    """$ per million cycles: a cycle's units at the on-demand list prices."""
    return float(cycle["totals"]["wru"]) * PRICE_WRU + float(cycle["totals"]["rru"]) * PRICE_RRU


def reexecuted(cycle: dict[str, Any]) -> int:
    """Tool effects that ran more than once in the cycle (each tool's runs past its first)."""
    return sum(max(0, int(n) - 1) for n in cycle["tool_runs"].values())


def table_wru(cycle: dict[str, Any]) -> float:
    """Write units on the base table (all write units less the indexes')."""
    return float(cycle["totals"]["wru"]) - float(sum(cycle["totals"]["index_wru"].values()))


def index_wru(cycle: dict[str, Any]) -> dict[str, float]:
    """Write units by index name (``gsi1:DUE`` and ``gsi1:OPEN#`` both count for ``gsi1``)."""
    out: dict[str, float] = {}
    for key, units in cycle["totals"]["index_wru"].items():
        name = key.split(":", 1)[0]
        out[name] = out.get(name, 0.0) + float(units)
    return out


def phase_requests(cycle: dict[str, Any]) -> list[int | None]:
    """Requests of each phase (None: the side has no such phase)."""
    return [None if cycle["phases"].get(p) is None else int(cycle["phases"][p]["requests"]) for p in PHASES]


def figures(result: dict[str, Any]) -> dict[str, float]:
    """Every number the drift check compares, by a stable name."""
    out: dict[str, float] = {}
    for side in SIDES:
        cycle = result.get(side)
        if not cycle:
            continue
        for phase, count in zip(PHASES, phase_requests(cycle), strict=True):
            if count is not None:
                out[f"{side} requests {phase}"] = count
        out[f"{side} requests"] = cycle["totals"]["requests"]
        out[f"{side} wru"] = cycle["totals"]["wru"]
        out[f"{side} rru"] = cycle["totals"]["rru"]
        out[f"{side} bytes per pause"] = cycle["bytes_per_pause"]
        out[f"{side} $ per million cycles"] = round(dollars(cycle), 4)
        out[f"{side} re-executed effects"] = reexecuted(cycle)
    for side, grown in (
        ("loopengine", result.get("growth", {})),
        ("langgraph", result.get("langgraph_growth", {})),
    ):
        for count, phases in grown.items():
            for phase, row in phases.items():
                if isinstance(row, dict):
                    for key in ("rru", "wru"):
                        out[f"{side} growth {count} {phase} {key}"] = row[key]
    if result.get("partitions"):
        busiest = max(result["partitions"], key=lambda r: (r["rate"], r["wru_per_second"]))
        out["loopengine busiest partition WRU/s"] = busiest["wru_per_second"]
    return out


def drift(previous: dict[str, float], now: dict[str, float], limit: float = DRIFT) -> list[str]:
    """One line per figure that moved by more than ``limit`` (a share of its previous value)."""
    lines = []
    for name in sorted(previous.keys() & now.keys()):
        old, new = float(previous[name]), float(now[name])
        change = (new - old) / abs(old) if old else (1.0 if new else 0.0)
        if abs(change) > limit:
            lines.append(f"{name}: {old:g} -> {new:g} ({change:+.0%})")
    return lines


# -- tables -------------------------------------------------------------------------------------------


def _num(value: float | None) -> str:
    if value is None:
        return DASH
    return f"{value:g}" if value == int(value) else f"{value:.2f}".rstrip("0")


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or theirs == 0:
        return DASH
    return f"{ours / theirs:.2f}x"


def _requests_cell(cycle: dict[str, Any]) -> str:
    counts = phase_requests(cycle)
    return " / ".join(_num(c) for c in counts) + f" = {cycle['totals']['requests']}"


def _wru_cell(cycle: dict[str, Any]) -> str:
    parts = [f"{_num(table_wru(cycle))} table"] + [f"{_num(v)} {k}" for k, v in index_wru(cycle).items()]
    return f"{_num(cycle['totals']['wru'])} ({' + '.join(parts)})"


def comparison(ours: dict[str, Any], theirs: dict[str, Any] | None) -> list[Row]:
    """The side-by-side rows: what, loopengine, LangGraph, ratio."""
    lines: list[tuple[str, Callable[[dict[str, Any]], str], Callable[[dict[str, Any]], float]]] = [
        (
            "requests (message→pause / resolve / resume→finish)",
            _requests_cell,
            lambda c: c["totals"]["requests"],
        ),
        ("write units (table + indexes)", _wru_cell, lambda c: c["totals"]["wru"]),
        ("read units", lambda c: _num(c["totals"]["rru"]), lambda c: c["totals"]["rru"]),
        ("items read", lambda c: _num(c["totals"]["items_read"]), lambda c: c["totals"]["items_read"]),
        ("bytes per pause (stored)", lambda c: _num(c["bytes_per_pause"]), lambda c: c["bytes_per_pause"]),
        ("$ per million cycles (on-demand)", lambda c: f"{dollars(c):.2f}", dollars),
        ("re-executed effects", lambda c: _num(reexecuted(c)), reexecuted),
    ]
    rows: list[Row] = []
    for label, cell, value in lines:
        other = cell(theirs) if theirs else DASH
        rows.append((label, cell(ours), other, _ratio(value(ours), value(theirs) if theirs else None)))
    entries = (theirs or {}).get("tool_entries")
    if entries:
        runs = ", ".join(f"{k} {v}" for k, v in sorted(ours["tool_runs"].items()))
        rows.append(("tool functions entered", runs, ", ".join(f"{k} {v}" for k, v in entries.items()), ""))
    return rows


def operations(ours: dict[str, Any], theirs: dict[str, Any] | None) -> list[Row]:
    """Requests by operation in each phase: phase, operation, loopengine, LangGraph."""
    rows: list[Row] = []
    for phase in PHASES:
        mine = (ours["phases"].get(phase) or {}).get("by_operation", {})
        other_phase = (theirs or {}).get("phases", {}).get(phase) if theirs else None
        other = (other_phase or {}).get("by_operation", {})
        for op in sorted(mine.keys() | other.keys()):
            rows.append(
                (phase, op, _num(mine.get(op, 0)), DASH if other_phase is None else _num(other.get(op, 0)))
            )
    return rows


def growth_rows(grown: dict[str, Any], side: str) -> list[Row]:
    """Per earlier-turn count: each phase's requests, items read, RRU and WRU."""
    rows: list[Row] = []
    for count, phases in grown.items():
        if "error" in phases:
            rows.append((side, count, DASH, str(phases["error"])[:80]))
            continue
        for phase, f in phases.items():
            cells = (
                f"{f['requests']} req, {f['items_read']} items, {_num(f['rru'])} RRU, {_num(f['wru'])} WRU"
            )
            rows.append((side, count, phase, cells))
    return rows


def partition_rows(partitions: list[dict[str, Any]]) -> list[Row]:
    """The busiest partitions per rate: rate, partition, WRU per cycle, WRU/s, share of the limit."""
    return [
        (
            f"{r['rate']:g}/s",
            r["key"] if len(r["key"]) <= 44 else r["key"][:41] + "...",
            _num(r["wru_per_cycle"]),
            _num(r["wru_per_second"]),
            f"{r['share_of_limit']:.1%}",
        )
        for r in partitions
    ]


def render(headers: Row, rows: Sequence[Row]) -> str:
    """A plain-text table, columns as wide as their widest cell."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in (headers, *rows)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(result: dict[str, Any]) -> str:
    """The whole printout of one result."""
    ours, theirs = result["loopengine"], result.get("langgraph")
    out = ["per cycle (pause + resolve + resume→finish), DynamoDB on moto, metered by bench/meter.py"]
    out.append(render(("", "loopengine", "LangGraph", "ratio"), comparison(ours, theirs)))
    if not theirs:
        out.append(f"LangGraph: not run ({result.get('langgraph_unavailable', 'skipped')})")
    out += [
        "",
        "requests by operation",
        render(("phase", "operation", "loopengine", "LangGraph"), operations(ours, theirs)),
    ]
    grown = growth_rows(result.get("growth", {}), "loopengine")
    grown += growth_rows(result.get("langgraph_growth", {}), "LangGraph")
    out += [
        "",
        "a cycle in a session (LangGraph: a thread) with 1 + N earlier finished turns",
        render(("side", "N", "phase", "figures"), grown),
    ]
    partitions = partition_rows(result.get("partitions", []))
    out += ["", "busiest partitions (loopengine; one partition takes 1,000 WRU/s)"]
    out.append(render(("rate", "partition", "WRU/cycle", "WRU/s", "of limit"), partitions))
    return "\n".join(out)


# -- running ------------------------------------------------------------------------------------------


def run_langgraph(python: Path, growth: Sequence[int] = GROWTH) -> dict[str, Any]:
    """The LangGraph side's JSON, run in the peers' environment."""
    argv = [str(python), str(CYCLE), "--growth", ",".join(str(n) for n in growth)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{CYCLE.name} failed: {done.stderr.strip()[-600:]}")
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def measure(peers: bool, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Both sides now (LangGraph only when ``peers`` and its environment builds)."""
    from bench import scenario

    result: dict[str, Any] = {"prices": {"wru_per_million": PRICE_WRU, "rru_per_million": PRICE_RRU}}
    progress("== loopengine: the common cycle, then the growth table (moto)")
    result["loopengine"] = scenario.common_cycle()
    result["growth"] = scenario.growth(GROWTH)
    result["partitions"] = scenario.partition_rates(result["loopengine"])
    if peers:
        try:
            python = venv.ensure(progress)
            progress("== LangGraph: the common cycle, then the growth table (moto, in .venv-peers)")
            theirs = run_langgraph(python)
            result["langgraph_growth"] = theirs.pop("growth", {})
            result["langgraph"] = theirs
        except (venv.PeersUnavailable, RuntimeError) as exc:
            result["langgraph_unavailable"] = str(exc)
    return result


def code_version() -> str | None:
    """``git describe --always --dirty`` of the checkout measured (None outside a git checkout)."""
    found = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    return found.stdout.strip() or None if found.returncode == 0 else None


def compare_and_write(result: dict[str, Any], path: Path = RESULT) -> list[str]:
    """Drift lines against the previous result at ``path`` (naming its ``code``); ``result`` replaces it."""
    result["figures"] = figures(result)
    lines: list[str] = []
    if path.is_file():
        previous = json.loads(path.read_text())
        lines = drift(previous.get("figures", {}), result["figures"])
        if lines:
            lines.insert(0, f"(previous run measured {previous.get('code') or 'unrecorded code'})")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Measure, print the tables, write the result and flag drift (exit 0 either way)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-peers", action="store_true", help="loopengine only (no LangGraph environment)")
    parser.add_argument(
        "--output", type=Path, default=RESULT, help="result JSON (default bench/results/peers.json)"
    )
    args = parser.parse_args(argv)
    result = measure(peers=not args.no_peers)
    result["code"] = code_version()
    print()
    print(report(result))
    moved = compare_and_write(result, args.output)
    where = args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output
    print(f"\nwritten: {where}")
    for line in moved:
        print(line if line.startswith("(") else f"WARNING drift > {DRIFT:.0%} since the previous run: {line}")
    if not moved:
        print(f"no figure moved by more than {DRIFT:.0%} since the previous run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
