"""Layering: the arrows between the packages of ``src/loopengine`` point down, and the core holds no SDK.

    local/      the developer's tools (dev server, chat, demo, CLI)          may import anything
    http/       the API Gateway edge (routes parse, call the Engine, reply)  not local/
    client      a client of the HTTP API for Python callers (httpx)          domain
    bootstrap   the composition root: picks adapters from settings           not local/, http/
    channels/   one package per notification channel, both directions        app, authoring, domain
                (a channel's HTTP edge, its routes.py and pages.py, as http/)
    stores/ models/ aws/   adapters of the application's ports               app, domain
    mcp/        the MCP client adapter (agent.yaml's mcp_servers)             app, authoring, domain
    app/        the application: engine, loop, batch, resolution, ...        authoring, domain
                inside it, the arrows point down too:
                  engine, follow, views, api_models   the facade the edge calls      all of app/
                  worker/   what a worker runs (claims a turn, runs calls)    request/, the kernel
                  request/  what a request records (never claims a turn)      the kernel
                  the kernel (the other modules of app/)                      neither side
    authoring/  agent definitions: schema, loader, registry, scaffold, Tool   domain
    domain/     pure: turn and checkpoint state, gate, policies, outcomes     nothing else of the project

The core (domain, authoring, app) imports no cloud SDK, HTTP client, model SDK or Powertools, at any
depth (function-level imports included).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import loopengine

PACKAGE = Path(loopengine.__file__).parent
LAYERS = ("domain", "authoring", "app")
ALLOWED: dict[str, set[str]] = {
    "domain": {"domain"},
    "authoring": {"domain", "authoring"},
    "app": {"domain", "authoring", "app"},
    "stores": {"domain", "app", "stores"},
    "models": {"domain", "app", "models"},
    "aws": {"domain", "app", "aws"},
    "mcp": {"domain", "authoring", "app", "mcp"},
    "channels": {"domain", "authoring", "app", "channels"},
    "bootstrap": {"domain", "authoring", "app", "stores", "models", "aws", "mcp", "channels", "bootstrap"},
    "http": {"domain", "authoring", "app", "stores", "models", "aws", "mcp", "channels", "bootstrap", "http"},
    "client": {"domain", "client"},
}
BANNED = {"boto3", "botocore", "httpx", "httpx2", "anthropic", "aws_lambda_powertools", "redis", "mcp"}
# the package root may name any module (it only re-exports, lazily)
ROOT_FILES = {"__init__.py"}


CHANNEL_EDGE = {"routes", "pages", "links", "interactions"}
"""A channel's routes and what they load on the first request (``channels/<name>/routes.py``, the
inbox's ``pages``, magic's ``links``, Slack's and Lark's ``interactions``): the channel's part of the
API Gateway edge, layered as ``http/`` is (the inbox's and magic's HTML renderers stay channel code)."""


def room(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    edge = rel.parts[0] == "channels" and len(rel.parts) == 3 and rel.stem in CHANNEL_EDGE
    if edge and not (rel.parts[1] == "magic" and rel.stem == "pages"):
        return "http"
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).as_posix() not in ROOT_FILES]


def imports(tree: ast.AST, path: Path) -> set[str]:
    """Every module named by an import anywhere in the tree (functions, try blocks included)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(
                    ("loopengine", *path.relative_to(PACKAGE).with_suffix("").parts)[: -node.level]
                )
                names.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Call):  # importlib.import_module("x") / __import__("x")
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names.add(first.value)
    return names


def project_rooms(names: set[str]) -> set[str]:
    """The rooms of ``loopengine`` that the names point into (``loopengine.app.worker.loop`` -> ``app``)."""
    found = set()
    for name in names:
        parts = name.split(".")
        if parts[0] != "loopengine" or len(parts) < 2:
            continue
        if (PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").exists():
            found.add(parts[1])
    return found


def test_every_module_is_in_a_known_room() -> None:
    rooms = {room(p) for p in modules()}
    assert rooms <= set(ALLOWED) | {"local"}, rooms - set(ALLOWED)
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_arrows_point_down(path: Path) -> None:
    where = room(path)
    if where == "local":
        return
    used = project_rooms(imports(ast.parse(path.read_text(), filename=str(path)), path))
    assert used <= ALLOWED[where], f"{where} imports {sorted(used - ALLOWED[where])}"


@pytest.mark.parametrize(
    "path",
    [p for p in modules() if room(p) in LAYERS],
    ids=lambda p: p.relative_to(PACKAGE).as_posix(),
)
def test_core_module_imports_no_sdk(path: Path) -> None:
    roots = {n.split(".")[0] for n in imports(ast.parse(path.read_text(), filename=str(path)), path)}
    assert not roots & BANNED, f"{path.name} imports {sorted(roots & BANNED)}"


APP_FACADE = {"engine", "follow", "views", "api_models", "operator", "__init__"}


def app_side(path: Path) -> str:
    """``request``, ``worker``, ``facade`` or ``kernel``: where a module of app/ stands."""
    parts = path.relative_to(PACKAGE / "app").with_suffix("").parts
    if parts[0] in ("request", "worker"):
        return parts[0]
    return "facade" if parts[0] in APP_FACADE else "kernel"


def app_sides_used(names: set[str]) -> set[str]:
    sides = set()
    for name in names:
        parts = name.split(".")
        if parts[:2] != ["loopengine", "app"] or len(parts) < 3:
            continue
        if parts[2] in ("request", "worker"):
            sides.add(parts[2])
        elif (PACKAGE / "app" / f"{parts[2]}.py").exists():
            sides.add("facade" if parts[2] in APP_FACADE else "kernel")
    return sides


APP_ALLOWED = {
    "kernel": {"kernel"},
    "request": {"kernel", "request"},
    "worker": {"kernel", "request", "worker"},
    "facade": {"kernel", "request", "worker", "facade"},
}


@pytest.mark.parametrize(
    "path", [p for p in modules() if room(p) == "app"], ids=lambda p: p.relative_to(PACKAGE).as_posix()
)
def test_a_request_never_reaches_into_the_worker(path: Path) -> None:
    """app/request/ records and hands on; only app/worker/ claims a turn; the kernel serves both."""
    side = app_side(path)
    used = app_sides_used(imports(ast.parse(path.read_text(), filename=str(path)), path))
    assert used <= APP_ALLOWED[side], f"{side} module imports {sorted(used - APP_ALLOWED[side])}"


def test_no_folder_is_a_pile() -> None:
    """No folder under src/ holds more than 16 modules directly."""
    src = PACKAGE.parent
    piles = {
        d.relative_to(src).as_posix(): n
        for d in [src, *src.rglob("*")]
        if d.is_dir() and "__pycache__" not in d.parts and (n := len(list(d.glob("*.py")))) > 16
    }
    assert not piles, piles


def test_the_checker_sees_what_it_must() -> None:
    source = (
        "def f():\n"
        "    try:\n"
        "        import boto3.session\n"
        "    except ImportError:\n"
        "        from httpx import Client\n"
        "    importlib.import_module('anthropic.types')\n"
        "    from loopengine import http\n"
    )
    names = imports(ast.parse(source), PACKAGE / "domain" / "x.py")
    assert {n.split(".")[0] for n in names} >= {"boto3", "httpx", "anthropic"}
    assert project_rooms(names) == {"http"}


def test_the_core_is_what_the_design_says() -> None:
    for module in ("app/engine.py", "app/worker/loop.py", "app/request/resolution.py", "app/worker/batch.py"):
        assert (PACKAGE / module).exists()
    for module in ("turn_state", "checkpoint", "gate", "policy", "outcomes", "messages", "principals"):
        assert (PACKAGE / "domain" / f"{module}.py").exists()


def test_importing_the_core_loads_no_sdk() -> None:
    code = (
        "import json, sys\n"
        "import loopengine.app.engine, loopengine.app.worker.loop, loopengine.app.views\n"
        "import loopengine.app.request.resolution\n"
        "print(json.dumps(sorted(m for m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = {m.split(".")[0] for m in json.loads(done.stdout)}
    assert not loaded & {"anthropic", "boto3", "botocore", "httpx", "aws_lambda_powertools"}


def test_one_home_for_the_shared_json_alias() -> None:
    """``JsonDict`` is defined once (domain/base/jsontypes.py); everything else imports it."""
    homes = [p for p in modules() if re.search(r"^JsonDict\s*=", p.read_text(), re.M)]
    assert [p.relative_to(PACKAGE).as_posix() for p in homes] == ["domain/base/jsontypes.py"]
