"""Cold import of each Lambda handler against the floor of its own third-party dependencies.

Each round imports a handler module (``handlers.api`` ...) in a fresh interpreter and, alternating
with it in the same run, a fresh interpreter that imports only that handler's own dependencies (its
*floor*, :data:`FLOORS`: boto3, pydantic, PyYAML and the Powertools pieces it uses). The median
CPU time gives the ratio handler / floor, which the contract wants at most :data:`TARGET`
(docs/performance.md "Cold start"); the wall ratio is shown too (on a shared machine, mostly waiting
for a CPU); beside it, the median of each round's own ratio ("paired": the two imports of a round ran
back to back, under the same load, which a load that comes and goes between rounds moves less). It
lists what each import loads: modules, our own and third-party, and which of
:data:`WATCH` (SDKs a handler's cold import should not load) are among them.

    python bench/cold_import.py [--rounds N] [--snapshot-rounds N] [--python PY] [--bytecode none] ...

Bytecode is written by a warm-up and read on both sides (as ``make build`` ships it); ``--bytecode
none`` imports copies of src/ and site-packages with no ``.pyc`` and writes none (a package nobody
compiled). ``--check`` exits 1 when the CPU ratio is above the target. Times depend on the machine
and its load (alternation puts both sides under the same load; bench/cold_instructions.py counts
instructions, which no load changes); tests/test_cold_start.py asserts module sets, never a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "bench" / "results" / "cold_import.json"
TARGET = 1.3
"""A handler's cold import may cost at most this many times its floor (median CPU time)."""

_COMMON = (
    "import boto3\n"
    "import yaml\n"
    "from pydantic import BaseModel, ConfigDict, Field\n"
    # pydantic imports its schema builder with the first model a program defines
    "class Floor(BaseModel):\n"
    "    model_config = ConfigDict(extra='forbid')\n"
    "    name: str = Field(default='', max_length=8)\n"
    "from aws_lambda_powertools import Logger, Metrics\n"
)
FLOORS: dict[str, str] = {
    # the api: Powertools' HTTP API resolver as the api builds it (validation on, which loads
    # Powertools' own request/response validation middleware)
    "handlers.api": _COMMON
    + (
        "from aws_lambda_powertools.event_handler import APIGatewayHttpResolver\n"
        "APIGatewayHttpResolver(enable_validation=True)\n"
    ),
    "handlers.resume": _COMMON,
    "handlers.schedule": _COMMON,
}
"""What each handler needs from outside the project: the code a floor interpreter runs."""
WATCH = (
    "anthropic",
    "aws_xray_sdk",
    "httpx",
    "jinja2",
    "redis",
    "mcp",
    "jsonschema",
    "cryptography",
    "asyncio",
    "aws_lambda_powertools.event_handler.openapi.models",
)
"""Modules reported when an import loads them (the handlers' cold imports should load none)."""
OURS = ("loopengine", "handlers", "agents")

PROBE = """
import json, resource, sys, time
before = set(sys.modules)
wall, cpu = time.perf_counter(), time.process_time()
exec(compile(CODE, "<cold import>", "exec"))
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"wall": wall, "cpu": cpu, "rss_kb": rss, "modules": sorted(set(sys.modules) - before)}))
"""


@dataclass(frozen=True)
class Sample:
    """One fresh interpreter's import: seconds of wall and CPU, peak RSS, the modules it added."""

    wall: float
    cpu: float
    rss_kb: int
    modules: frozenset[str]


SNAPSHOT_ENV = {
    "LOOPENGINE_TABLE": "loopengine-bench",  # DynamoDB as in AWS; its client is made on first use: no call
    "LOOPENGINE_RESUME_FUNCTION": "loopengine-bench-resume",
    "ANTHROPIC_API_KEY": "sk-ant-bench-never-sent",  # a key is configured: the hook loads the model SDK
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""The environment of a snapshot probe: offline, but what a deployment configures."""


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a probe: ``src`` on the path, no loopengine or model settings but ``extra``."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_", "POWERTOOLS_"))
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode written by the warm-up, then read (see above)
    return {**env, **(extra or {})}


def source_env(python: str, dest: Path) -> dict[str, str]:
    """Copy src/ and ``python``'s site-packages to ``dest`` without bytecode; the env importing from them."""
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([python, "-c", where], capture_output=True, text=True, check=True).stdout.strip()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "src", dest / "src", ignore=ignore)
    shutil.copytree(purelib, dest / "site", ignore=ignore)
    path = os.pathsep.join([str(dest / "src"), str(dest / "site")])
    return {"PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


def probe(code: str, python: str = sys.executable, env: dict[str, str] | None = None) -> Sample:
    """Run ``code`` in a fresh interpreter and measure it."""
    done = subprocess.run(
        [python, "-c", f"CODE = {code!r}\n{PROBE}"],
        capture_output=True,
        text=True,
        env=child_env(env),
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"probe failed:\n{code}\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return Sample(out["wall"], out["cpu"], out["rss_kb"], frozenset(out["modules"]))


def handler_code(module: str) -> str:
    """What a handler probe runs: the import Lambda does at init."""
    return f"import {module}\n"


def snapshot_code(module: str) -> str:
    """The import plus SnapStart's before-snapshot hooks (a stand-in ``snapshot_restore_py`` runs them)."""
    return (
        "import sys, types\n"
        "_hooks = []\n"
        "_fake = types.ModuleType('snapshot_restore_py')\n"
        "_fake.register_before_snapshot = lambda f, *a, **k: _hooks.append((f, a, k))\n"
        "_fake.register_after_restore = lambda f, *a, **k: None\n"
        "sys.modules['snapshot_restore_py'] = _fake\n"
        f"import {module}\n"
        "for _f, _a, _k in reversed(_hooks):\n"
        "    _f(*_a, **_k)\n"
    )


def watched(modules: frozenset[str]) -> list[str]:
    """The modules of :data:`WATCH` among ``modules``."""
    return [name for name in WATCH if name in modules]


def ours(modules: frozenset[str]) -> list[str]:
    """The project's own modules among ``modules``."""
    return sorted(m for m in modules if m.split(".")[0] in OURS)


def third_party(modules: frozenset[str]) -> set[str]:
    """The top-level packages outside the standard library and the project among ``modules``."""
    tops = {m.split(".")[0] for m in modules}
    return {t for t in tops if t not in sys.stdlib_module_names and t not in OURS and not t.startswith("_")}


@dataclass
class Result:
    """One handler against its floor over the rounds."""

    module: str
    rounds: int
    handler: list[Sample] = field(default_factory=list)
    floor: list[Sample] = field(default_factory=list)
    snapshot: list[Sample] = field(default_factory=list)

    def median(self, side: str, what: str) -> float:
        """The median ``what`` (``wall``, ``cpu``, ``rss_kb``) of ``side`` (``handler``, ``floor``)."""
        middle: float = statistics.median(getattr(s, what) for s in getattr(self, side))
        return middle

    def least(self, side: str, what: str) -> float:
        """The smallest ``what`` of ``side`` (the run least disturbed by other load)."""
        least: float = min(getattr(s, what) for s in getattr(self, side))
        return least

    def ratio(self, what: str) -> float:
        """Handler median / floor median (the figure the target applies to)."""
        return self.median("handler", what) / self.median("floor", what)

    def paired(self, what: str) -> float:
        """The median of each round's handler / floor (the two ran back to back: the same load)."""
        rounds = zip(self.handler, self.floor, strict=True)
        ratios: list[float] = [getattr(h, what) / getattr(f, what) for h, f in rounds]
        return statistics.median(ratios)

    def summary(self) -> dict[str, object]:
        """The figures written to the JSON result."""
        mods, floor_mods = self.handler[-1].modules, self.floor[-1].modules
        return {
            "module": self.module,
            "rounds": self.rounds,
            "handler_ms": {w: round(self.median("handler", w) * 1000, 1) for w in ("wall", "cpu")},
            "floor_ms": {w: round(self.median("floor", w) * 1000, 1) for w in ("wall", "cpu")},
            "ratio": {w: round(self.ratio(w), 3) for w in ("wall", "cpu")},
            "min_ms": {
                side: {w: round(self.least(side, w) * 1000, 1) for w in ("wall", "cpu")}
                for side in ("handler", "floor")
            },
            "paired_ratio": {w: round(self.paired(w), 3) for w in ("wall", "cpu")},
            "min_ratio": {
                w: round(self.least("handler", w) / self.least("floor", w), 3) for w in ("wall", "cpu")
            },
            "ok": self.ok(),
            "peak_rss_mb": {
                "handler": round(self.median("handler", "rss_kb") / 1024, 1),
                "floor": round(self.median("floor", "rss_kb") / 1024, 1),
            },
            "modules": {
                "handler": len(mods),
                "floor": len(floor_mods),
                "ours": len(ours(mods)),
                "beyond_floor": len(mods - floor_mods),
                "floor_missing": sorted(third_party(floor_mods) - third_party(mods)),
                "third_party": sorted(third_party(mods)),
            },
            "watched": watched(mods),
            "floor_code": FLOORS[self.module],
            "snapshot": self.snapshot_summary(),
        }

    def snapshot_summary(self) -> dict[str, object]:
        """What the before-snapshot hook adds: time of import + hook, peak RSS, modules (no target)."""
        if not self.snapshot:
            return {}
        return {
            "rounds": len(self.snapshot),
            "ms": {w: round(self.median("snapshot", w) * 1000, 1) for w in ("wall", "cpu")},
            "vs_floor": {
                w: round(self.median("snapshot", w) / self.median("floor", w), 2) for w in ("wall", "cpu")
            },
            "peak_rss_mb": round(self.median("snapshot", "rss_kb") / 1024, 1),
            "modules": len(self.snapshot[-1].modules),
            "watched": watched(self.snapshot[-1].modules),
            "env": SNAPSHOT_ENV,
        }

    def ok(self) -> bool:
        """The CPU ratio within :data:`TARGET`."""
        return self.ratio("cpu") <= TARGET


def measure(
    module: str,
    rounds: int,
    snapshot_rounds: int = 0,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
) -> Result:
    """``rounds`` alternating pairs, then ``snapshot_rounds`` imports with the before-snapshot hooks.

    The handler goes first on even rounds, the floor on odd ones. ``env``: added to every probe's.
    """
    result = Result(module, rounds)
    code = handler_code(module)
    probe(code, python, env)  # warm-up: bytecode (unless env forbids it) and the page cache, both sides
    probe(FLOORS[module], python, env)
    for i in range(rounds):
        pair = [("handler", code), ("floor", FLOORS[module])]
        for side, text in pair if i % 2 == 0 else reversed(pair):
            getattr(result, side).append(probe(text, python, env))
    for _ in range(snapshot_rounds):
        result.snapshot.append(probe(snapshot_code(module), python, {**(env or {}), **SNAPSHOT_ENV}))
    return result


def table(results: list[Result]) -> str:
    """The results as the text table docs/performance.md shows."""
    head = (
        f"{'handler':<18} {'wall ms':>8} {'floor':>7} {'ratio':>6}   {'cpu ms':>7} {'floor':>7} {'ratio':>6}"
        f" {'paired':>6}   {'modules':>7} {'ours':>5} {'RSS MB':>6}  watched"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        s = r.summary()
        h, f, q, m = s["handler_ms"], s["floor_ms"], s["ratio"], s["modules"]
        assert isinstance(h, dict) and isinstance(f, dict) and isinstance(q, dict) and isinstance(m, dict)
        rss = s["peak_rss_mb"]
        assert isinstance(rss, dict)
        flag = "" if r.ok() else "   ABOVE TARGET"
        lines.append(
            f"{r.module:<18} {h['wall']:8.1f} {f['wall']:7.1f} {q['wall']:6.2f}"
            f"   {h['cpu']:7.1f} {f['cpu']:7.1f} {q['cpu']:6.2f} {r.paired('cpu'):6.2f}"
            f"   {m['handler']:7d} {m['ours']:5d} {rss['handler']:6.1f}  "
            f"{', '.join(s['watched']) or '-'}{flag}"  # type: ignore[arg-type]
        )
    return "\n".join(lines)


def machine(python: str = sys.executable) -> dict[str, object]:
    """Where the figures were taken."""
    version = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return {
        "python": version,
        "interpreter": python,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def run(
    rounds: int,
    modules: list[str] | None = None,
    snapshot_rounds: int = 3,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
) -> list[Result]:
    """Measure every handler of :data:`FLOORS` (or the ``modules`` given) with the interpreter ``python``."""
    return [measure(m, rounds, snapshot_rounds, python, env) for m in modules or list(FLOORS)]


def snapshot_table(results: list[Result]) -> str:
    """What each handler's SnapStart snapshot holds beyond the import (the hook's work)."""
    lines = [f"{'snapshot of':<18} {'cpu ms':>7} {'x floor':>8} {'RSS MB':>7} {'modules':>8}  watched"]
    for r in results:
        s = r.snapshot_summary()
        if not s:
            continue
        ms, vs = s["ms"], s["vs_floor"]
        assert isinstance(ms, dict) and isinstance(vs, dict)
        watch = ", ".join(s["watched"]) or "-"  # type: ignore[arg-type]
        rss, count = s["peak_rss_mb"], s["modules"]
        lines.append(f"{r.module:<18} {ms['cpu']:7.1f} {vs['cpu']:8.2f} {rss:7.1f} {count:8d}  {watch}")
    return "\n".join(lines)


def write(results: list[Result], out: Path, python: str = sys.executable, bytecode: str = "cached") -> None:
    """Write the JSON result (figures, module counts, where they were taken)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "target": TARGET,
        "bytecode": bytecode,
        "machine": machine(python),
        "handlers": [r.summary() for r in results],
    }
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11, help="alternating pairs per handler (default 11)")
    parser.add_argument(
        "--out", type=Path, default=RESULT, help=f"JSON result (default {RESULT.relative_to(ROOT)})"
    )
    parser.add_argument(
        "--snapshot-rounds", type=int, default=3, help="runs with the snapshot hook (0: none)"
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter to measure (e.g. a python3.12 environment with the runtime lock, as Lambda's)",
    )
    parser.add_argument(
        "--bytecode",
        choices=("cached", "none"),
        default="cached",
        help="none: no .pyc for src/ and site-packages (a Lambda package nobody compiled)",
    )
    parser.add_argument("--check", action="store_true", help=f"exit 1 when a CPU ratio is above {TARGET}")
    parser.add_argument("modules", nargs="*", help="handler modules (default: all three)")
    args = parser.parse_args(argv)
    if shutil.which(args.python) is None:
        parser.error(f"--python {args.python}: no such interpreter (see docs/performance.md, Cold start)")
    if args.rounds < 1 or args.snapshot_rounds < 0:
        parser.error("--rounds must be at least 1 and --snapshot-rounds at least 0")
    with tempfile.TemporaryDirectory(prefix="cold-import-") as tmp:
        env = None if args.bytecode == "cached" else source_env(args.python, Path(tmp))
        results = run(args.rounds, args.modules, args.snapshot_rounds, args.python, env)
    print(
        f"cold import, medians of {args.rounds} alternating rounds, bytecode {args.bytecode}"
        f" (target: CPU <= {TARGET}x the floor)"
    )
    print(table(results))
    if args.snapshot_rounds:
        print(f"\nimport + SnapStart's before-snapshot hook, medians of {args.snapshot_rounds} (no target)")
        print(snapshot_table(results))
    write(results, args.out, args.python, args.bytecode)
    print(f"written: {args.out}")
    return 1 if args.check and not all(r.ok() for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
