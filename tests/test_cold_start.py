"""What each Lambda handler's cold import loads (bench/cold_import.py says how long it takes).

Only module sets are asserted here, never a time: each handler is imported in a fresh interpreter as
Lambda's init does, beside its floor (the handler's own third-party dependencies, the bench's
``FLOORS``). No handler loads a model, tracing, HTTP-client, template, redis or MCP SDK at import;
every handler loads its whole floor (so the bench compares like with like: a handler cannot look
cheap by leaving boto3 to its first request); beyond the floor it loads only its own modules and a
few of the standard library's. The approval path through the api handler never imports the model
SDK, even with a key configured.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench.cold_import import FLOORS, OURS, Sample, handler_code, probe, third_party

from loopengine.app.invokers import RecordingInvoker
from loopengine.channels.inbox import render
from loopengine.channels.inbox import routes as routes_inbox
from loopengine.http import root
from loopengine.http.functions import preload

ROOT = Path(__file__).resolve().parent.parent
HANDLERS = sorted(FLOORS)
BANNED = ("anthropic", "aws_xray_sdk", "httpx", "jinja2", "redis", "mcp", "jsonschema", "cryptography")
"""SDKs no handler's cold import loads: each is imported where it is used, if at all."""
NOT_AT_IMPORT = (
    "aws_lambda_powertools.event_handler.openapi.models",  # only GET /openapi.json and /docs use them
    "aws_lambda_powertools.event_handler.openapi.swagger_ui",
    "loopengine.models.anthropic",
    "loopengine.local",
)
OURS_BUDGET = {"handlers.api": 118, "handlers.resume": 93, "handlers.schedule": 93}
"""At most this many of the project's own modules per handler import (85, 71, 71 when written; 107 for
the api before its channel routes loaded their code on first use; 102 once app/ was split into
request/ and worker/, domain/ gained base/ and the channels' routes moved into their packages (package
modules); the model bill, issue 27, added about 7 to each handler: usage, metering, the context
window, compaction, the /usage route, and the packages that hold them; +1 for
authoring/mcp_transport.py, agent.yaml's MCP transport keys, when stdio servers came; the chat's
routes (its package and routes) and the cross-site refusal, three more for the api)."""
OTHERS_BUDGET = 10
"""At most this many other modules beyond the floor (5 or 6 when written: difflib, gc, pieces of
Powertools and pydantic; the workers' asyncio, about 25 modules, was over it)."""
CHANNEL_PACKAGES = ("slack", "lark", "magic", "inbox", "chat")
ROUTES = {c: f"loopengine.channels.{c}.routes" for c in CHANNEL_PACKAGES}
"""Where each channel's routes are declared: in its own package."""
DECLARED = {"loopengine.channels", *(f"loopengine.channels.{c}" for c in CHANNEL_PACKAGES), *ROUTES.values()}
"""What of the channel packages the api loads at init: the packages and their route declarations."""
CHANNEL_PAGES = {
    "loopengine.channels.chat.pages",
    "loopengine.channels.inbox.pages",
    "loopengine.channels.magic.links",
    "loopengine.channels.slack.interactions",
    "loopengine.channels.lark.interactions",
}
"""The modules that answer a channel's routes on their first request (preload.API_ON_FIRST_USE)."""

pytestmark = pytest.mark.xdist_group("cold-start")
"""One worker probes each handler's import once for every test here (a probe is a fresh interpreter)."""

_samples: dict[str, Sample] = {}


def sample(code: str) -> Sample:
    if code not in _samples:
        _samples[code] = probe(code)
    return _samples[code]


def tops(modules: frozenset[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("module", HANDLERS)
def test_no_handler_imports_an_sdk_it_does_not_need(module: str) -> None:
    loaded = sample(handler_code(module)).modules
    assert not tops(loaded) & set(BANNED), sorted(tops(loaded) & set(BANNED))
    early = [m for m in NOT_AT_IMPORT if any(x == m or x.startswith(m + ".") for x in loaded)]
    assert not early, early


@pytest.mark.parametrize("module", HANDLERS)
def test_every_handler_loads_its_whole_floor(module: str) -> None:
    handler, floor = sample(handler_code(module)), sample(FLOORS[module])
    assert "boto3" in tops(handler.modules)
    assert third_party(floor.modules) <= third_party(handler.modules)


@pytest.mark.parametrize("module", HANDLERS)
def test_beyond_its_floor_a_handler_loads_little_but_its_own_code(module: str) -> None:
    handler, floor = sample(handler_code(module)), sample(FLOORS[module])
    beyond = handler.modules - floor.modules
    ours = {m for m in beyond if m.split(".")[0] in OURS}
    others = sorted(beyond - ours)
    assert len(ours) <= OURS_BUDGET[module], f"{len(ours)} of our modules: {sorted(ours)}"
    assert len(others) <= OTHERS_BUDGET, f"{len(others)} other modules: {others}"
    outside = third_party(frozenset(others)) - third_party(floor.modules)
    assert not outside, sorted(outside)  # no third-party package the floor does not have


@pytest.mark.parametrize("module", ["handlers.resume", "handlers.schedule"])
def test_the_workers_cold_import_does_not_load_asyncio(module: str) -> None:
    """asyncio (about 25 modules, 3 % of the workers' floor) is for async tools and the model SDK only."""
    assert "asyncio" not in sample(handler_code(module)).modules


STRING_ANNOTATED_MODELS = """
import json, sys
from pydantic import BaseModel
import {module}
found = sorted(
    f"{{name}}.{{cls.__qualname__}}"
    for name, mod in list(sys.modules.items()) if name.startswith("loopengine")
    for cls in vars(mod).values()
    if isinstance(cls, type) and issubclass(cls, BaseModel) and cls.__module__ == name
    and any(isinstance(a, str) for a in vars(cls).get("__annotations__", {{}}).values())
)
print(json.dumps(found))
"""
STRING_ANNOTATED_OK = {"loopengine.authoring.mcp.McpServerModel"}
"""Its module keeps ``from __future__ import annotations`` for its dataclasses (7 annotations, ~1 M
instructions)."""


@pytest.mark.parametrize("module", HANDLERS)
def test_the_pydantic_models_a_handler_imports_have_no_string_annotations(module: str) -> None:
    """pydantic compiles each string annotation of a model (``from __future__ import annotations``)
    when the class is made: 139 of them were about 14 million instructions of the api's import."""
    found = set(_classes_found(STRING_ANNOTATED_MODELS, module))
    assert found <= STRING_ANNOTATED_OK, sorted(found - STRING_ANNOTATED_OK)


_scans: dict[tuple[str, str], list[str]] = {}


def _classes_found(code: str, module: str) -> list[str]:
    """What ``code`` (one of the scans above, importing ``{module}``) prints, from a fresh interpreter.

    One interpreter runs every scan of a module (each prints one JSON line), once per worker.
    """
    if (code, module) not in _scans:
        scans = (STRING_ANNOTATED_MODELS,)
        for scan, found in zip(scans, _scan(module, scans), strict=True):
            _scans[(scan, module)] = found
    return _scans[(code, module)]


def _scan(module: str, scans: tuple[str, ...]) -> list[list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}
    env["PYTHONPATH"] = str(ROOT / "src")
    code = "\n".join(scan.format(module=module) for scan in scans)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()[-len(scans) :]
    return [json.loads(line) for line in lines]


def test_the_apis_cold_import_loads_no_channels_request_code() -> None:
    """Slack, Lark, magic links and the inbox load with their routes' first request, not at init."""
    loaded = sample(handler_code("handlers.api")).modules
    assert not [m for m in loaded if m.startswith("loopengine.channels") and m not in DECLARED]
    assert not set(preload.API_ON_FIRST_USE) & loaded
    assert set(ROUTES.values()) <= loaded  # the routes are declared


FIRST_REQUESTS = (
    "health",
    "list_pending",
    "get_turn",
    "slack_interaction",
    "lark_interaction",
    "magic_get",
    "magic_post",
    "inbox",
    "inbox_decide",
    "inbox_static",
    "chat",
    "chat_static",
)


def first_requests(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """In a fresh api handler: each sample event in turn; its status and the modules it loaded."""
    code = (
        "import json, sys\n"
        "import handlers.api\n"
        "from tests.handler_support import call, load_event\n"
        "out = {}\n"
        f"for name in {FIRST_REQUESTS!r}:\n"
        "    before = set(sys.modules)\n"
        "    status, _ = call(handlers.api.handler, load_event(name))\n"
        "    out[name] = {'status': status, 'loaded': sorted(set(sys.modules) - before)}\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        LOOPENGINE_DB=str(tmp_path / "first.db"),
        LOOPENGINE_MODEL="scripted",
        LOOPENGINE_ADMIN_AUTH="admin:secret",
        POWERTOOLS_METRICS_NAMESPACE="loopengine-test",
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def channel_code(modules: list[str]) -> set[str]:
    """The channels' request code among ``modules``: any of ``loopengine.http`` (at init the api has
    loaded every other), and the channel packages' modules the routes use."""
    packages = tuple(f"loopengine.channels.{c}." for c in CHANNEL_PACKAGES)
    return {m for m in modules if m.startswith(("loopengine.http.", *packages))}


def test_each_channel_route_loads_its_own_code_on_its_first_request_and_no_other(tmp_path: Path) -> None:
    """GIVEN a fresh api handler, WHEN each route gets its first request, THEN only its channel loads.

    The cold start no longer pays for the channels, and no other first request does either: a JSON
    route's first request loads none of their code, so its cold start (init plus first request) is
    that much cheaper; a channel route's first request pays only for its own channel.
    """
    out = first_requests(tmp_path)
    assert out["health"]["status"] == 200 and out["list_pending"]["status"] == 200, out
    for name in ("health", "list_pending", "get_turn"):
        assert not channel_code(out[name]["loaded"]), (name, out[name])
    seen: set[str] = set()
    for name in FIRST_REQUESTS[3:]:
        channel = name.split("_")[0]
        loaded = channel_code(out[name]["loaded"])
        others = [c for c in CHANNEL_PACKAGES if c not in (channel, "magic")]  # the inbox reuses magic's form
        assert not [m for m in loaded if any(f".{c}" in m for c in others)], (name, sorted(loaded))
        seen |= loaded
    lazy = {m for m in seen if m.startswith("loopengine.http.") or m in CHANNEL_PAGES}
    assert lazy == set(preload.API_ON_FIRST_USE)  # what the snapshot hook imports is exactly this


def test_the_snapshot_holds_the_channels_request_code(tmp_path: Path) -> None:
    """GIVEN SnapStart, WHEN the before-snapshot hook runs, THEN no restored api pays for a channel."""
    code = (
        "import json, sys, types\n"
        "hooks = []\n"
        "fake = types.ModuleType('snapshot_restore_py')\n"
        "fake.register_before_snapshot = lambda f, *a, **k: hooks.append((f, a, k))\n"
        "fake.register_after_restore = lambda f, *a, **k: None\n"
        "sys.modules['snapshot_restore_py'] = fake\n"
        "import handlers.api\n"
        "for f, a, k in hooks: f(*a, **k)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}
    env.update(
        PYTHONPATH=str(ROOT / "src"),
        LOOPENGINE_DB=str(tmp_path / "snap.db"),
        LOOPENGINE_MODEL="scripted",
        POWERTOOLS_METRICS_NAMESPACE="loopengine-test",
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert set(preload.API_ON_FIRST_USE) <= loaded
    assert {f"loopengine.channels.{c}" for c in CHANNEL_PACKAGES} <= loaded


def test_the_inbox_routes_path_is_the_pages_own() -> None:
    assert routes_inbox.PAGE_PATH == render.PAGE_PATH


def test_the_approval_path_never_imports_the_model_sdk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a paused turn, WHEN a fresh api handler with a model key approves it, THEN no SDK loads."""
    db = str(tmp_path / "approve.db")
    for name in ("LOOPENGINE_TABLE", "LOOPENGINE_RESUME_FUNCTION", "LOOPENGINE_AGENTS_PATH"):
        monkeypatch.delenv(name, raising=False)
    engine = root.build({"LOOPENGINE_DB": db, "LOOPENGINE_MODEL": "scripted"})
    engine.rt.invoker = RecordingInvoker()
    try:
        out = engine.send_message("customer-service", "Order A-1001 arrived broken, please refund it.")
    finally:
        engine.rt.stores.close()
    assert out.pending, out
    code = (
        "import json, sys\n"
        "import handlers.api\n"
        "from loopengine.app.invokers import RecordingInvoker\n"
        "from loopengine.http import root\n"
        "from tests.handler_support import call, load_event\n"
        "invoker = RecordingInvoker()\n"
        "root.engine().rt.invoker = invoker\n"
        f"event = load_event('resolve_approve', pendingId={out.pending[0].pending_id!r})\n"
        "status, body = call(handlers.api.handler, event)\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({BANNED!r}))\n"
        "print(json.dumps({'status': status, 'invoked': invoker.invoked, 'loaded': loaded}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        LOOPENGINE_DB=db,
        LOOPENGINE_ADMIN_AUTH="admin:secret",
        ANTHROPIC_API_KEY="sk-ant-configured-but-unused",
        POWERTOOLS_METRICS_NAMESPACE="loopengine-test",
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] in (200, 202) and result["invoked"] == [out.turn_id], result
    assert result["loaded"] == [], result


# -- what make build ships: sam build's output, compiled --------------------------------------------


def python312() -> str | None:
    """A Python 3.12 on this machine (Lambda's runtime), if there is one."""
    found = [
        shutil.which("python3.12"),
        *map(str, sorted(Path("/root/.pyenv/versions").glob("3.12*/bin/python3.12"))),
    ]
    for candidate in filter(None, found):
        done = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
        )
        if done.returncode == 0 and done.stdout.strip() == "(3, 12)":
            return candidate
    return None


def compile_build(tmp_path: Path, python: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``make compile-build`` on a stand-in of sam build's output, ``python`` as ``python3.12`` on PATH."""
    bin_dir, module = tmp_path / "bin", tmp_path / "build" / "ApiFunction" / "loopengine" / "mod.py"
    bin_dir.mkdir()
    (bin_dir / "python3.12").symlink_to(python)
    module.parent.mkdir(parents=True)
    module.write_text("X = 1\n")
    make = shutil.which("make") or "make"
    env = {"PATH": os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])}
    args = [make, "-s", "-C", str(ROOT), "compile-build", f"SAM_BUILD_DIR={tmp_path / 'build'}"]
    return subprocess.run(args, capture_output=True, text=True, env=env, check=False), module


def test_make_build_compiles_what_sam_built_with_the_runtimes_python(tmp_path: Path) -> None:
    """sam build ships sources only; Lambda's /var/task is read-only: make build ships the bytecode."""
    python = python312()
    if python is None:
        pytest.skip("no Python 3.12 on this machine")
    make = shutil.which("make") or "make"
    dry = subprocess.run([make, "-n", "-C", str(ROOT), "build"], capture_output=True, text=True, check=False)
    assert "compileall" in dry.stdout and "--invalidation-mode unchecked-hash" in dry.stdout
    done, module = compile_build(tmp_path, python)
    assert done.returncode == 0, done.stderr
    [pyc] = (module.parent / "__pycache__").iterdir()
    assert pyc.name == "mod.cpython-312.pyc"
    flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
    assert flags == 0b01  # hash-based and not checked: used as it is, whatever the zip's file times


def test_make_build_says_so_when_it_cannot_compile_for_the_runtime(tmp_path: Path) -> None:
    done, module = compile_build(tmp_path, sys.executable)  # this is not 3.12 (a container build's case)
    assert sys.version_info[:2] != (3, 12)
    assert done.returncode == 0 and "ships without bytecode" in done.stderr
    assert not (module.parent / "__pycache__").exists()


# -- what the template gives the functions (template.yaml; cfn-lint and SAM: tests/test_template.py) --


def _template() -> dict[str, Any]:
    from samtranslator.yaml_helper import yaml_parse

    template: dict[str, Any] = yaml_parse((ROOT / "template.yaml").read_text())
    return template


FUNCTIONS = ("ApiFunction", "ResumeFunction", "ScheduleFunction")


def test_each_function_declares_its_memory_and_architecture_with_the_reason() -> None:
    template, text = _template(), (ROOT / "template.yaml").read_text()
    assert "MemorySize" not in template["Globals"]["Function"]
    assert "Architectures" not in template["Globals"]["Function"]
    for name in FUNCTIONS:
        props = template["Resources"][name]["Properties"]
        assert isinstance(props["MemorySize"], int) and props["MemorySize"] >= 512, name
        assert props["Architectures"] == [{"Ref": "FunctionArchitecture"}], name
        block = text[text.index(f"  {name}:") :]
        reason = block[: block.index("MemorySize:")].rsplit("Timeout:", 1)[1]
        assert "measured" in reason and "RSS" in reason, (name, reason)


def test_the_workers_have_reserved_concurrency_the_api_cannot_take() -> None:
    template = _template()
    params, conditions = template["Parameters"], template["Conditions"]
    for name, param, default in (
        ("ResumeFunction", "ResumeReservedConcurrency", 0),  # a ceiling too: off until sized (issue 27)
        ("ScheduleFunction", "ScheduleReservedConcurrency", 2),
    ):
        assert params[param]["Default"] == default and params[param]["MinValue"] == 0
        reserved = template["Resources"][name]["Properties"]["ReservedConcurrentExecutions"]
        condition, value, otherwise = reserved["Fn::If"]
        assert value == {"Ref": param} and otherwise == {"Ref": "AWS::NoValue"}
        # 0 leaves the function unreserved: Lambda's "reserve 0" would stop it
        assert conditions[condition] == {"Fn::Not": [{"Fn::Equals": [{"Ref": param}, "0"]}]}
    assert "ReservedConcurrentExecutions" not in template["Resources"]["ApiFunction"]["Properties"]


def test_tracing_is_lambdas_own_and_opentelemetry_an_optional_layer() -> None:
    template = _template()
    globals_ = template["Globals"]["Function"]
    assert globals_["Tracing"] == "Active"
    assert template["Parameters"]["AdotLayerArn"]["Default"] == ""
    env = globals_["Environment"]["Variables"]
    assert env["AWS_LAMBDA_EXEC_WRAPPER"] == {
        "Fn::If": ["HasAdotLayer", "/opt/otel-instrument", {"Ref": "AWS::NoValue"}]
    }
    for name in FUNCTIONS:
        layers = template["Resources"][name]["Properties"]["Layers"]
        assert layers == {"Fn::If": ["HasAdotLayer", [{"Ref": "AdotLayerArn"}], {"Ref": "AWS::NoValue"}]}
