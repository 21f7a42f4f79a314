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
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench.cold_import import FLOORS, OURS, Sample, handler_code, probe, third_party

from loopengine.app.invokers import RecordingInvoker
from loopengine.http import root

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
OURS_BUDGET = {"handlers.api": 140, "handlers.resume": 95, "handlers.schedule": 95}
"""At most this many of the project's own modules per handler import (106, 70, 70 when written)."""
OTHERS_BUDGET = 40
"""At most this many other modules beyond the floor (the resume worker's asyncio is about 25 of them)."""

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
        ("ResumeFunction", "ResumeReservedConcurrency", 10),
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
