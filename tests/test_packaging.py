"""The wheel installs only the library: no top-level ``handlers`` or ``agents`` in a user's environment.

``src/handlers`` (the Lambda shims the SAM template names) and ``src/agents`` (the example agents)
ship in the SAM ``CodeUri`` (``src/``); the HTTP app they call is part of the library
(:mod:`loopengine.http`), so ``loopengine dev`` imports nothing outside it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_only_the_loopengine_package(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("loopengine-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert top == {"loopengine"}, top
    assert "loopengine/http/api.py" in names and "loopengine/local/dev.py" in names


def test_the_library_never_imports_the_lambda_shims_or_the_example_agents() -> None:
    offenders = []
    for path in (ROOT / "src" / "loopengine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("handlers", "agents")]
    assert offenders == []


def test_the_lambda_shims_are_the_librarys_handlers() -> None:
    import handlers.api
    import handlers.resume
    import handlers.schedule
    import loopengine.http.api
    import loopengine.http.resume
    import loopengine.http.schedule

    assert handlers.api.handler is loopengine.http.api.handler
    assert handlers.resume.handler is loopengine.http.resume.handler
    assert handlers.schedule.handler is loopengine.http.schedule.handler
