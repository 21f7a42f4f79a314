"""Instructions each Lambda handler's cold import executes against its floor: a figure no load moves.

bench/cold_import.py times each import (CPU medians of alternating runs), which the load of a shared
machine moves by several percent. This counts the instructions instead, with valgrind's callgrind:
one fresh interpreter per side (``PYTHONHASHSEED=0``, bytecode as in cold_import.py), less one that
imports nothing (the interpreter's own start-up, the same on both sides):

    ratio = (Ir(handler) - Ir(start-up)) / (Ir(floor) - Ir(start-up))

Instructions are not time: the kernel's work for new memory, cache misses and instructions per
cycle differ between the sides (on the development machine the CPU ratio has run a few hundredths
above this one). It is the figure to compare two versions of the code by; the target applies to
the CPU ratio.

    python bench/cold_instructions.py [--python PY] [--bytecode none] [--out FILE] [handlers.api ...]

Each count takes about a minute under valgrind (more on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import cold_import  # noqa: E402

RESULT = ROOT / "bench" / "results" / "cold_instructions.json"


def count(code: str, python: str, env: dict[str, str] | None = None) -> int:
    """Instructions (callgrind's ``Ir``) a fresh interpreter executes running ``code``."""
    with tempfile.TemporaryDirectory(prefix="callgrind-") as tmp:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out", python, "-c", code],
            capture_output=True,
            text=True,
            env={**cold_import.child_env(env), "PYTHONHASHSEED": "0"},
            cwd=ROOT,
            timeout=3600,
            check=False,
        )
    found = re.search(r"refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"valgrind failed on:\n{code}\n{done.stderr[-2000:]}")
    return int(found[1].replace(",", ""))


def measure(module: str, python: str, start: int, env: dict[str, str] | None = None) -> dict[str, object]:
    """The instructions of ``module``'s import and of its floor, less ``start`` (the start-up's)."""
    code, floor_code = cold_import.handler_code(module), cold_import.FLOORS[module]
    cold_import.probe(code, python, env)  # bytecode written first, as cold_import's warm-up does
    cold_import.probe(floor_code, python, env)
    handler, floor = count(code, python, env) - start, count(floor_code, python, env) - start
    return {
        "module": module,
        "handler": handler,
        "floor": floor,
        "ratio": round(handler / floor, 3),
        "ok": handler / floor <= cold_import.TARGET,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter to measure")
    parser.add_argument("--bytecode", choices=("cached", "none"), default="cached")
    parser.add_argument("--out", type=Path, default=RESULT, help="JSON result")
    parser.add_argument("modules", nargs="*", help="handler modules (default: all three)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cold-instructions-") as tmp:
        env = None if args.bytecode == "cached" else cold_import.source_env(args.python, Path(tmp))
        start = count("", args.python, env)
        results = [measure(m, args.python, start, env) for m in args.modules or list(cold_import.FLOORS)]
    print(f"instructions of each cold import, start-up ({start:,}) taken off, bytecode {args.bytecode}")
    print(f"{'handler':<18} {'handler':>15} {'floor':>15} {'ratio':>6}")
    for r in results:
        print(f"{r['module']:<18} {r['handler']:>15,} {r['floor']:>15,} {r['ratio']:>6.3f}")
    doc = {
        "target": cold_import.TARGET,
        "bytecode": args.bytecode,
        "machine": cold_import.machine(args.python),
        "startup": start,
        "handlers": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
