"""The project's wheel, built once per test run from a clean copy of the sources.

Building a wheel takes seconds (uv's build, the installer ``make`` puts in ``.venv``; ``pip wheel``
takes twice the CPU where there is no uv), and two tests read one: the packaging test (only
the ``loopengine`` package ships) and the inbox's (its templates and static files ship). The first
to ask builds it into the run's base temporary directory, which the pytest-xdist workers share,
under a file lock; the other finds it there. The copy holds ``pyproject.toml``, ``README.md`` and all
of ``src/`` without caches: an in-tree ``build/`` left by an earlier build cannot hide a file the
package data would miss.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The path of the wheel this test run built (building it if no test did yet)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base  # one directory for all workers
    work = shared / "wheel"
    work.mkdir(exist_ok=True)
    with (shared / "wheel.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = list(work.glob("loopengine-*.whl"))
        if found:
            return found[0]
        source = work / "source"
        shutil.rmtree(source, ignore_errors=True)
        source.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, source / name)
        ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
        shutil.copytree(ROOT / "src", source / "src", ignore=ignore)
        uv = Path(sys.prefix) / ".uv" / "bin" / "uv"
        if uv.exists():
            command = [str(uv), "build", "--wheel", "-q", "--out-dir", str(work), str(source)]
        else:
            command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work), str(source)]
        subprocess.run(command, check=True, capture_output=True)
        (wheel,) = work.glob("loopengine-*.whl")
        return wheel
