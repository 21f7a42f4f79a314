"""SAM local, asked of SAM CLI's own providers: no container runtime, no AWS account, no network.

``sam local start-api`` mounts the routes that ``ApiProvider`` reads from the template's stacks
(``SamLocalStackProvider``) and runs, for each, the function ``SamFunctionProvider`` finds under the
route's function name; ``sam local invoke --env-vars events/env.json`` gives a function the
environment that ``LocalLambdaRunner`` builds. These tests ask exactly those classes, through
``tests/sam_cli_probe.py`` run by SAM CLI's own interpreter (``.venv-sam``: aws-sam-cli pins an
exact boto3 the project must not be held to). Then every sample event in ``events/`` runs through
the handler the template names, with that environment, each in a process of its own forked from
one interpreter per function that imported the handler (a SnapStart restore of the function's
init), and a 5xx or an error fails.

Run ``pytest tests/test_sam_local.py -s`` to see the route table ``sam local start-api`` mounts.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from tests.design_routes import DESIGN_ROUTES, PUBLIC_ROUTES

pytestmark = pytest.mark.sam  # SAM CLI's interpreter (.venv-sam): make test builds it after the fast tests

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
EVENTS = ROOT / "events"
ENV_FILE = EVENTS / "env.json"
SRC = ROOT / "src"
API_FUNCTION = "ApiFunction"
JWT_ON = {"JwtIssuer": "https://issuer.example.com/", "JwtAudience": "loopengine"}


@dataclass(frozen=True)
class Mounted:
    """One route as ``sam local start-api`` would mount it."""

    route: str  # "METHOD /path"
    function: str | None  # the template's logical id, None when SAM CLI finds no function
    handler: str | None


def sam_python() -> Path:
    """SAM CLI's interpreter: ``LOOPENGINE_SAM_PYTHON`` or ``.venv-sam`` (``make`` creates it)."""
    path = Path(os.environ.get("LOOPENGINE_SAM_PYTHON") or ROOT / ".venv-sam" / "bin" / "python")
    if not path.exists():
        pytest.fail(f"no SAM CLI interpreter at {path}: run `make .venv-sam/.installed` (aws-sam-cli)")
    return path


def request(
    template: Path = TEMPLATE,
    overrides: dict[str, str] | None = None,
    disable_authorizer: bool = False,
    env_file: Path | None = None,
) -> dict[str, Any]:
    """A question for tests/sam_cli_probe.py about ``template``."""
    return {
        "template": str(template),
        "cwd": str(ROOT),
        "overrides": overrides or {},
        "disable_authorizer": disable_authorizer,
        "env_file": str(env_file) if env_file else None,
    }


def probe(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What SAM CLI's providers report for each of ``requests``, from one SAM CLI interpreter in a
    clean shell (tests/sam_cli_probe.py)."""
    clean = {"PATH": os.environ.get("PATH", ""), "AWS_CONFIG_FILE": os.devnull}
    clean["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    proc = subprocess.run(
        [str(sam_python()), str(ROOT / "tests" / "sam_cli_probe.py"), json.dumps(requests)],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers: list[dict[str, Any]] = json.loads(proc.stdout.splitlines()[-1])
    return answers


def mounted_routes(answer: dict[str, Any]) -> list[Mounted]:
    """The routes ``sam local start-api`` mounts, as ``probe`` reported them."""
    out = [Mounted(route, function, handler) for route, function, handler in answer["routes"]]
    return sorted(out, key=lambda m: (m.route.split(" ", 1)[1], m.route))


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """SAM CLI's report on each template these tests ask about: template.yaml with events/env.json,
    with the JWT authorizer on, and the two broken copies the checks must catch."""
    tmp = tmp_path_factory.mktemp("sam-templates")
    broken = {"missing-route": _missing_route_template(), "unmapped": _unmapped_template()}
    for name, template in broken.items():
        (tmp / f"{name}.json").write_text(json.dumps(template))
    requests = {
        "template": request(env_file=ENV_FILE),
        "jwt": request(overrides=JWT_ON, disable_authorizer=True),
        **{name: request(template=tmp / f"{name}.json") for name in broken},
    }
    return dict(zip(requests, probe(list(requests.values())), strict=True))


@pytest.fixture(scope="module")
def sam(reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """SAM CLI's report on template.yaml with events/env.json."""
    return reports["template"]


def problems(mounted: list[Mounted]) -> list[str]:
    """What keeps ``mounted`` from being DESIGN's route table, all on the api function."""
    keys = [m.route for m in mounted]
    found = set(keys)
    out = [f"{r}: not mounted" for r in sorted(DESIGN_ROUTES - found)]
    out += [f"{r}: mounted but not in DESIGN.md" for r in sorted(found - DESIGN_ROUTES)]
    out += [f"{r}: mounted twice" for r in sorted({k for k in keys if keys.count(k) > 1})]
    out += [
        f"{m.route}: runs {m.function}, not {API_FUNCTION}" for m in mounted if m.function != API_FUNCTION
    ]
    return out


def route_table(mounted: list[Mounted]) -> str:
    """The table ``sam local start-api`` would print, with the function behind each route."""
    if not mounted:
        return "(none: SAM CLI would say the template has no APIs connected to Lambda functions)"
    width = max(len(m.route) for m in mounted)
    rows = [f"{m.route:<{width}}  ->  {m.function} ({m.handler})" for m in mounted]
    return "\n".join(rows)


# ------------------------------------------------------------------ sam local start-api


def test_sam_local_start_api_mounts_every_design_route_on_the_api_function(sam: dict[str, Any]) -> None:
    mounted = mounted_routes(sam)
    print(f"\nsam local start-api mounts {len(mounted)} routes:\n{route_table(mounted)}")
    assert problems(mounted) == []
    assert {m.handler for m in mounted} == {"handlers.api.handler"}


def test_deploy_md_shows_the_route_table_sam_local_mounts(sam: dict[str, Any]) -> None:
    assert f"```\n{route_table(mounted_routes(sam))}\n```" in (ROOT / "docs" / "deploy.md").read_text()


def test_with_the_jwt_authorizer_on_disable_authorizer_mounts_the_same_routes(
    reports: dict[str, dict[str, Any]],
) -> None:
    # SAM CLI emulates no JWT authorizer: with JwtIssuer set, `--disable-authorizer` is needed.
    assert problems(mounted_routes(reports["jwt"])) == []


def _template() -> dict[str, Any]:
    template: dict[str, Any] = yaml_parse(TEMPLATE.read_text())
    return template


def _paths(template: dict[str, Any]) -> dict[str, Any]:
    paths: dict[str, Any] = template["Resources"]["HttpApi"]["Properties"]["DefinitionBody"]["paths"]
    return paths


def _missing_route_template() -> dict[str, Any]:
    """template.yaml without ``GET /docs``, and ``GET /health`` sent to the resume function."""
    broken = copy.deepcopy(_template())
    del _paths(broken)["/docs"]
    health = _paths(broken)["/health"]["get"]["x-amazon-apigateway-integration"]
    health["uri"] = {"Fn::Sub": health["uri"]["Fn::Sub"].replace("-api:live", "-resume:live")}
    return broken


def _unmapped_template() -> dict[str, Any]:
    """The layout this template had before: plain AWS::ApiGatewayV2 routes behind a function."""
    broken = copy.deepcopy(_template())
    broken["Resources"]["HttpApi"] = {
        "Type": "AWS::ApiGatewayV2::Api",
        "Properties": {"Name": "loopengine", "ProtocolType": "HTTP"},
    }
    broken["Resources"]["HealthRoute"] = {
        "Type": "AWS::ApiGatewayV2::Route",
        "Properties": {"ApiId": {"Ref": "HttpApi"}, "RouteKey": "GET /health"},
    }
    return broken


def test_the_check_names_a_missing_route_and_a_route_on_another_function(
    reports: dict[str, dict[str, Any]],
) -> None:
    found = problems(mounted_routes(reports["missing-route"]))
    assert "GET /docs: not mounted" in found
    assert f"GET /health: runs ResumeFunction, not {API_FUNCTION}" in found
    assert len(found) == 2, found


def test_the_check_names_routes_sam_cli_cannot_map_to_a_function(reports: dict[str, dict[str, Any]]) -> None:
    # The old layout mounts nothing: SAM CLI picks its function-event reader and finds no HttpApi events.
    found = problems(mounted_routes(reports["unmapped"]))
    assert len(found) == len(DESIGN_ROUTES)
    assert all(p.endswith(": not mounted") for p in found)


# ---------------------------------------------------------------------- sam local invoke


def _env_file() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(ENV_FILE.read_text())
    return loaded


@pytest.mark.parametrize("name", ["ApiFunction", "ResumeFunction", "ScheduleFunction"])
def test_env_file_reaches_every_function_and_points_at_nothing_in_aws(name: str, sam: dict[str, Any]) -> None:
    env: dict[str, str] = sam["env"][name]
    # SAM CLI sets only variables the template declares: every entry must arrive as written.
    for key, value in _env_file()["Parameters"].items():
        assert env.get(key) == value, f"{name}: {key} is not declared in template.yaml"
    assert env["LOOPENGINE_TABLE"] == ""  # embedded SQLite, not a table in the user's account
    assert env["LOOPENGINE_DB"].startswith("/tmp/")  # the container's one writable directory
    assert env["LOOPENGINE_MODEL"] == "scripted"
    assert env["LOOPENGINE_RESUME_FUNCTION"] == ""  # resumes run in-process, not via Lambda
    for key, value in env.items():
        if key.startswith(("LOOPENGINE_", "ANTHROPIC_")):
            assert "arn:" not in value and "amazonaws.com" not in value, f"{key}={value}"
            assert "{{resolve:" not in value, f"{key}={value}"
    assert env["ANTHROPIC_API_KEY"] == ""


def test_the_sample_events_carry_the_env_files_admin_credential() -> None:
    admin = _env_file()["Parameters"]["LOOPENGINE_ADMIN_AUTH"]
    expected = "Basic " + base64.b64encode(admin.encode()).decode()
    carried = {ev["headers"].get("authorization") for ev in _http_events().values()}
    assert carried == {expected, None}


def test_samconfig_points_sam_local_at_the_env_file() -> None:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())["default"]
    for command in ("local_start_api", "local_invoke", "local_start_lambda"):
        assert config[command]["parameters"]["env_vars"] == "events/env.json", command


def _sample_events() -> list[str]:
    return sorted(p.name for p in EVENTS.glob("*.json") if p != ENV_FILE)


def _http_events() -> dict[str, dict[str, Any]]:
    loaded = {name: json.loads((EVENTS / name).read_text()) for name in _sample_events()}
    return {name: ev for name, ev in loaded.items() if "routeKey" in ev}


def _function_for(name: str, event: dict[str, Any], by_route: dict[str, str | None]) -> str:
    if "routeKey" in event:
        function = by_route.get(event["routeKey"])
        assert function, f"{name}: sam local start-api mounts no {event['routeKey']}"
        return function
    return "ResumeFunction" if name.startswith("resume") else "ScheduleFunction"


# One interpreter per function, like its container after init: it imports the handler the template
# names (the function's environment set), then forks one process per event, like a SnapStart restore
# of that init. Each fork gets its own empty /tmp (its store), builds its engine from there (nothing
# built before the fork: checked), calls the handler with the event and a Lambda-like context and
# writes what it returned to a file.
INVOKE = """
import importlib, json, os, sys
from loopengine.http import root
from loopengine.local.dev import LocalContext
handler, name, timeout, runs = sys.argv[1], sys.argv[2], float(sys.argv[3]), json.loads(sys.argv[4])
module, _, attr = handler.rpartition(".")
fn = getattr(importlib.import_module(module), attr)
assert root._engine is None, "the handler's import built an engine: a fork would share its store"
sys.stdout.flush(); sys.stderr.flush()
children = {}
for event_file, out_file, err_file, db in runs:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            err = os.open(err_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(err, 2)
            os.environ["LOOPENGINE_DB"] = db
            context = LocalContext(function_name=name, timeout_seconds=timeout)
            result = fn(json.loads(open(event_file).read()), context)
            open(out_file, "w").write(json.dumps(result))
            code = 0
        except BaseException:
            import traceback; traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    children[pid] = out_file
codes = {children[pid]: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in list(children)}
print(json.dumps(codes))
"""


@dataclass(frozen=True)
class Invoked:
    function: str
    returncode: int
    result: Any
    stderr: str


@pytest.fixture(scope="module")
def invoked(sam: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Invoked]:
    """Every sample event through its function: each in its own process and empty /tmp."""
    by_route = {m.route: m.function for m in mounted_routes(sam)}
    events = {name: json.loads((EVENTS / name).read_text()) for name in _sample_events()}
    by_function: dict[str, list[str]] = {}
    for event_name, event in events.items():
        by_function.setdefault(_function_for(event_name, event, by_route), []).append(event_name)

    def prepare(name: str) -> tuple[list[list[str]], dict[str, tuple[Path, Path]]]:
        """Each event's own /tmp (made here: TempPathFactory is not safe across threads)."""
        runs, paths = [], {}
        for event_name in by_function[name]:
            # The container's /tmp is this invocation's own directory here.
            tmp = tmp_path_factory.mktemp(event_name.removesuffix(".json"))
            db = str(tmp / Path(sam["env"][name]["LOOPENGINE_DB"]).relative_to("/tmp"))
            paths[event_name] = (tmp / "result.json", tmp / "stderr.txt")
            runs.append([str(EVENTS / event_name), *map(str, paths[event_name]), db])
        return runs, paths

    prepared = {name: prepare(name) for name in by_function}

    def run(name: str) -> dict[str, Invoked]:
        function = sam["functions"][name]
        env = {**sam["env"][name], "PYTHONPATH": str(SRC)}
        runs, paths = prepared[name]
        tail = (str(function["timeout"]), json.dumps(runs))
        proc = subprocess.run(
            [sys.executable, "-c", INVOKE, *(function[k] for k in ("handler", "functionname")), *tail],
            cwd=SRC,  # the code directory, as /var/task in the container
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 0, f"{name}'s interpreter failed: {proc.stderr[-3000:]}"
        codes = json.loads(proc.stdout.splitlines()[-1])
        found = {}
        for event_name, (out, err) in paths.items():
            result = json.loads(out.read_text()) if out.exists() else None
            stderr = err.read_text() if err.exists() else ""
            found[event_name] = Invoked(name, codes[str(out)], result, stderr)
        return found

    with ThreadPoolExecutor(max_workers=len(by_function)) as pool:
        return {k: v for found in pool.map(run, sorted(by_function)) for k, v in found.items()}


@pytest.mark.parametrize("name", _sample_events())
def test_sample_event_runs_cleanly_with_the_env_file(name: str, invoked: dict[str, Invoked]) -> None:
    run = invoked[name]
    assert run.returncode == 0 and run.result is not None, run.stderr[-3000:]
    event = json.loads((EVENTS / name).read_text())
    print(f"\n{name} -> {run.function}: {json.dumps(run.result)[:200]}")
    if "routeKey" in event:
        status = run.result["statusCode"]
        assert status < 500, f"{name}: {status} {run.result.get('body', '')[:300]}"
        if event["routeKey"] not in PUBLIC_ROUTES:
            assert status not in (401, 403), f"{name}: the admin credential was refused"
    elif name.startswith("resume"):
        # an empty store (a fresh container): nothing to resume, and nothing raised
        assert run.result == {"resumed": False, "turnId": event["turnId"], "reason": "no such turn"}
    else:
        assert "error" not in run.result, run.result
        assert run.result.get("started") is not False, run.result
