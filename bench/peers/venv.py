"""The peers' virtualenv, ``.venv-peers``: LangGraph and langgraph-checkpoint-aws, never the product's.

Built from bench/peers/requirements.txt (every package pinned and hash-checked; compiled from
requirements.in by ``python bench/peers/venv.py --lock``) with uv when the project has it
(``.venv/.uv/bin/uv``, as the Makefile installs it), else with pip. A stamp holding the lock's
digest says the environment is current, so later runs reuse it; a changed lock rebuilds it.
Standard library only.

    .venv/bin/python bench/peers/venv.py            # build (or reuse) it, print its python
    .venv/bin/python bench/peers/venv.py --lock     # re-pin requirements.txt from requirements.in
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
HERE = Path(__file__).resolve().parent
VENV = ROOT / ".venv-peers"
LOCK = HERE / "requirements.txt"
SOURCE = HERE / "requirements.in"
UV = ROOT / ".venv" / ".uv" / "bin" / "uv"
STAMP = ".installed"


class PeersUnavailable(RuntimeError):
    """The peers' environment could not be built (the message says why)."""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def python(venv: Path = VENV) -> Path:
    """The environment's interpreter."""
    return venv / "bin" / "python"


def current(venv: Path = VENV, lock: Path = LOCK) -> bool:
    """Whether ``venv`` was built from ``lock`` as it is now."""
    stamp = venv / STAMP
    return python(venv).exists() and stamp.is_file() and stamp.read_text().strip() == _digest(lock)


def _run(argv: list[str], progress: Callable[[str], None]) -> None:
    env = {**os.environ, "UV_LINK_MODE": os.environ.get("UV_LINK_MODE", "copy"), "PIP_NO_INPUT": "1"}
    found = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if found.returncode != 0:
        tail = (found.stderr or found.stdout).strip().splitlines()[-3:]
        raise PeersUnavailable(f"{Path(argv[0]).name} failed ({found.returncode}): {' | '.join(tail)}")


def ensure(
    progress: Callable[[str], None] = print,
    venv: Path = VENV,
    lock: Path = LOCK,
    uv: Path | None = UV,
    base: str | None = None,
) -> Path:
    """The peers' python, building ``venv`` from ``lock`` first unless it is current.

    ``PeersUnavailable`` when it cannot be built (no network to the package index, no venv module).
    """
    if current(venv, lock):
        return python(venv)
    base = base or str(getattr(sys, "_base_executable", sys.executable))
    use_uv = uv is not None and uv.exists()
    progress(f"== building {venv.name} from {lock.relative_to(ROOT) if lock.is_relative_to(ROOT) else lock}")
    progress(f"   ({'uv' if use_uv else 'pip'}; LangGraph, langgraph-checkpoint-aws, moto: about 100 MB)")
    shutil.rmtree(venv, ignore_errors=True)
    try:
        if use_uv:
            assert uv is not None
            _run([base, "-m", "venv", "--without-pip", str(venv)], progress)
            _run(
                [str(uv), "pip", "sync", "--python", str(python(venv)), "--require-hashes", str(lock)],
                progress,
            )
        else:
            _run([base, "-m", "venv", str(venv)], progress)
            pip = [
                str(python(venv)),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--progress-bar",
                "off",
            ]
            _run([*pip, "--require-hashes", "-r", str(lock)], progress)
    except (OSError, PeersUnavailable) as exc:
        shutil.rmtree(venv, ignore_errors=True)
        raise PeersUnavailable(f"cannot build {venv.name}: {exc}") from None
    (venv / STAMP).write_text(_digest(lock) + "\n")
    progress(f"== {venv.name} ready")
    return python(venv)


def lock(uv: Path = UV) -> None:
    """Re-pin requirements.txt from requirements.in (every dependency, with hashes)."""
    argv = [str(uv), "pip", "compile", "--python-version", "3.11", "--generate-hashes", "--no-header"]
    _run([*argv, "-q", str(SOURCE), "-o", str(LOCK)], print)


if __name__ == "__main__":
    if "--lock" in sys.argv[1:]:
        lock()
    else:
        try:
            print(ensure(progress=lambda line: print(line, file=sys.stderr)))
        except PeersUnavailable as exc:
            raise SystemExit(str(exc)) from None
