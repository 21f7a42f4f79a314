"""The public authoring API: what agent code imports comes from ``loopengine`` itself."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import loopengine

ROOT = Path(__file__).resolve().parent.parent


def test_every_public_name_resolves_to_what_it_says() -> None:
    for name in loopengine.__all__:
        value = getattr(loopengine, name)
        assert getattr(value, "__name__", name) == name, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Tools'"):
        _ = loopengine.Tools


def test_importing_the_root_loads_no_sdk_and_no_engine() -> None:
    code = "import json, sys, loopengine; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert not {m.split(".")[0] for m in loaded} & {"anthropic", "boto3", "httpx", "pydantic", "yaml"}
    assert "loopengine.app.engine" not in loaded


def _loopengine_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("loopengine"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("loopengine"))
    return found


def test_the_example_agent_and_the_scaffold_import_only_the_root() -> None:
    for path in sorted((ROOT / "src" / "agents").rglob("*.py")):
        assert _loopengine_imports(path) <= {"loopengine"}, path
    from loopengine.authoring import scaffold_templates

    for name in ("TOOLS_PY", "SCRIPT_PY", "TEST_PY"):
        source = getattr(scaffold_templates, name).replace("$name", "x").replace("$module", "x")
        tree = ast.parse(source)
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert {m for m in modules if m.startswith("loopengine")} <= {"loopengine"}, name
