"""Layering: the domain core imports no cloud SDK, HTTP client or model SDK, at any depth.

Adapters (``stores/``, ``models/``, ``notify/``, ``aws/``) and the composition roots that choose them
(``bootstrap.py``, ``cli.py``, ``demo.py``, ``dev.py``) may import what they adapt; nothing else may.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import loopengine

PACKAGE = Path(loopengine.__file__).parent
ADAPTER_PACKAGES = {"stores", "models", "notify", "aws", "http"}
COMPOSITION_FILES = {"bootstrap.py", "cli.py", "demo.py", "dev.py"}
BANNED = {"boto3", "botocore", "httpx", "httpx2", "anthropic", "aws_lambda_powertools"}


def core_modules() -> list[Path]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ADAPTER_PACKAGES or (len(rel.parts) == 1 and rel.name in COMPOSITION_FILES):
            continue
        found.append(path)
    return found


def imported_roots(tree: ast.AST) -> set[str]:
    """Top-level package of every import anywhere in the tree (functions, try blocks included)."""
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call):  # importlib.import_module("x") / __import__("x")
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    roots.add(first.value.split(".")[0])
    return roots


def test_the_core_is_what_we_think_it_is() -> None:
    names = {p.relative_to(PACKAGE).as_posix() for p in core_modules()}
    for module in ("engine.py", "loop.py", "resolution.py", "batch.py", "gate.py", "checkpoint.py"):
        assert module in names
    assert not any(n.startswith(("stores/", "models/", "notify/")) for n in names)


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_core_module_imports_no_sdk(path: Path) -> None:
    roots = imported_roots(ast.parse(path.read_text(), filename=str(path)))
    assert not roots & BANNED, f"{path.name} imports {sorted(roots & BANNED)}"


def test_the_checker_sees_nested_imports() -> None:
    source = (
        "def f():\n"
        "    try:\n"
        "        import boto3.session\n"
        "    except ImportError:\n"
        "        from httpx import Client\n"
        "    importlib.import_module('anthropic.types')\n"
    )
    assert imported_roots(ast.parse(source)) >= {"boto3", "httpx", "anthropic"}


def test_importing_the_core_loads_no_sdk() -> None:
    code = (
        "import json, sys\n"
        "import loopengine.engine, loopengine.loop, loopengine.resolution, loopengine.views\n"
        "print(json.dumps(sorted(m for m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = {m.split(".")[0] for m in json.loads(done.stdout)}
    assert not loaded & {"anthropic", "boto3", "botocore", "httpx", "aws_lambda_powertools"}
