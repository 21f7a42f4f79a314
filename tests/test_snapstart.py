"""SnapStart: what the snapshot holds, and what a restored environment makes fresh.

The Lambda Python runtime provides ``snapshot_restore_py``; here a stand-in module in ``sys.modules``
records what :func:`loopengine.http.functions.snapstart.init` registers, and the test runs the hooks the way
Lambda does (before-snapshot hooks in reverse order of registration, after-restore hooks in order).
The store is DynamoDB and the model key a Secrets Manager secret (moto), as in AWS; which modules a
hook imports is checked in a fresh interpreter (the test process has imported everything already).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parameters.constants import DEFAULT_PROVIDERS

from loopengine.app.engine import Engine
from loopengine.app.invokers import RecordingInvoker
from loopengine.authoring import agent_loader
from loopengine.authoring import registry as registry_module
from loopengine.authoring.agent import AgentConfig
from loopengine.aws.lambda_invoker import LambdaInvoker
from loopengine.domain.base.errors import ConfigError
from loopengine.http import root, secrets
from loopengine.http.functions import snapstart
from tests.contract.conftest import moto_dynamodb

# With tests/test_model_anthropic.py: one pytest-xdist worker imports the Anthropic SDK (about 2 s of CPU)
pytestmark = pytest.mark.xdist_group("anthropic-sdk")

ROOT = Path(__file__).resolve().parent.parent
TABLE = "loopengine-snapstart-test"
KEY_SECRET = "loopengine/anthropic-key"
ENV = {
    "LOOPENGINE_TABLE": TABLE,
    "ANTHROPIC_API_KEY_SECRET_ARN": KEY_SECRET,
    "LOOPENGINE_RESUME_FUNCTION": "loopengine-resume",
    "LOOPENGINE_RESUME_VERSION": "7",
    "LOOPENGINE_ADMIN_AUTH": "admin:secret",
    "POWERTOOLS_METRICS_NAMESPACE": "loopengine-test",
}
UNSET = (
    "LOOPENGINE_DB",
    "LOOPENGINE_MODEL",
    "ANTHROPIC_API_KEY",
    "AWS_ENDPOINT_URL",
    "LOOPENGINE_AGENTS_PATH",
)
Hook = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class FakeRuntimeHooks(types.ModuleType):
    """``snapshot_restore_py`` as the Lambda runtime provides it: registrations, run in Lambda's order."""

    def __init__(self) -> None:
        super().__init__("snapshot_restore_py")
        self.before: list[Hook] = []
        self.after: list[Hook] = []

    def register_before_snapshot(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.before.append((func, args, kwargs))

    def register_after_restore(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.after.append((func, args, kwargs))

    def snapshot(self) -> None:
        for func, args, kwargs in reversed(self.before):
            func(*args, **kwargs)

    def restore(self) -> None:
        for func, args, kwargs in self.after:
            func(*args, **kwargs)


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> FakeRuntimeHooks:
    fake = FakeRuntimeHooks()
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", fake)
    return fake


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """GIVEN an environment as in AWS: a moto table, the model key in Secrets Manager, a resume function."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    DEFAULT_PROVIDERS.clear()
    root.install(None)
    with moto_dynamodb(TABLE):
        sm = boto3.client("secretsmanager", region_name="us-east-1")
        sm.create_secret(Name=KEY_SECRET, SecretString="sk-ant-before-snapshot")
        try:
            yield sm
        finally:
            root.install(None)
            DEFAULT_PROVIDERS.clear()


def test_init_registers_both_hooks_where_the_runtime_provides_them(hooks: FakeRuntimeHooks) -> None:
    assert snapstart.init("api") is True
    assert [(f, a) for f, a, _ in hooks.before] == [(snapstart.before_snapshot, ("api",))]
    assert [(f, a) for f, a, _ in hooks.after] == [(snapstart.after_restore, ())]


def test_init_registers_nothing_outside_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)  # import fails: not Lambda's runtime
    assert snapstart.init("resume") is False


def test_the_snapshot_holds_the_engine_and_the_parsed_agents(
    aws: Any, hooks: FakeRuntimeHooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    parse = agent_loader.parse_folder  # the function the registry calls (its own import of it)

    def parse_noted(folder: Path, *a: Any) -> AgentConfig:
        parsed.append(folder.name)
        return parse(folder, *a)

    monkeypatch.setattr(registry_module, "parse_folder", parse_noted)
    builds: list[Engine] = []
    build = root.build

    def build_noted(*a: Any, **k: Any) -> Engine:
        builds.append(build(*a, **k))
        return builds[-1]

    monkeypatch.setattr(root, "build", build_noted)
    snapstart.init("resume")

    hooks.snapshot()

    assert len(builds) == 1 and root.engine() is builds[0]  # built before the snapshot, not by a request
    assert parsed == ["customer_service"]  # every agent folder parsed, its tools imported
    root.registry().get("customer-service")
    assert parsed == ["customer_service"]  # the first request parses nothing
    assert isinstance(builds[0].rt.invoker, LambdaInvoker)


def test_a_restored_environment_makes_every_client_anew(aws: Any, hooks: FakeRuntimeHooks) -> None:
    snapstart.init("resume")
    hooks.snapshot()
    before = root.engine()
    table_client = before.rt.stores.turns.table.client  # type: ignore[attr-defined]
    assert before.rt.stores.turns.get_turn("trn_" + "0" * 32) is None  # the client has been used

    hooks.restore()

    after = root.engine()
    assert after is not before
    assert after.rt.stores.turns.table.client is not table_client  # type: ignore[attr-defined]
    assert after.rt.invoker is not before.rt.invoker
    assert after.rt.model_for is not before.rt.model_for
    assert after.rt.stores.turns.get_turn("trn_" + "0" * 32) is None  # and the new one works


def test_a_restored_environment_reads_the_model_key_again(aws: Any, hooks: FakeRuntimeHooks) -> None:
    snapstart.init("api")
    hooks.snapshot()
    assert secrets.environ()["ANTHROPIC_API_KEY"] == "sk-ant-before-snapshot"
    aws.put_secret_value(SecretId=KEY_SECRET, SecretString="sk-ant-rotated")
    assert secrets.environ()["ANTHROPIC_API_KEY"] == "sk-ant-before-snapshot"  # cached in the snapshot

    hooks.restore()

    assert "secrets" not in DEFAULT_PROVIDERS  # its client and cache are gone
    assert secrets.environ()["ANTHROPIC_API_KEY"] == "sk-ant-rotated"


def test_a_restored_environment_draws_its_own_random_numbers(hooks: FakeRuntimeHooks) -> None:
    snapstart.init("schedule")
    random.seed(1234)  # the state every environment restored from one snapshot would share
    shared = random.getstate()
    hooks.restore()
    assert random.getstate() != shared


def test_a_secret_that_cannot_be_read_does_not_stop_the_snapshot(
    aws: Any, hooks: FakeRuntimeHooks, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY_SECRET_ARN", "loopengine/no-such-secret")
    snapstart.init("resume")

    hooks.snapshot()  # the version still publishes

    assert "snapshot taken without a built engine" in caplog.text and "ANTHROPIC_API_KEY" in caplog.text
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        root.engine()  # the request path reports it, as without SnapStart


def test_the_api_snapshot_holds_every_routes_validation(aws: Any, hooks: FakeRuntimeHooks) -> None:
    from loopengine.app import api_models as m

    snapstart.init("api")
    hooks.snapshot()
    assert m.ResolveRequest.__pydantic_complete__ and m.TurnView.__pydantic_complete__
    assert snapstart.warm_api() == 200


def run_hooks(kind: str, env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    """In a fresh interpreter: import ``handlers.<kind>`` with a stand-in runtime, take the snapshot."""
    code = (
        "import json, sys, types\n"
        "before = []\n"
        "fake = types.ModuleType('snapshot_restore_py')\n"
        "fake.register_before_snapshot = lambda f, *a, **k: before.append((f, a, k))\n"
        "fake.register_after_restore = lambda f, *a, **k: None\n"
        "sys.modules['snapshot_restore_py'] = fake\n"
        f"import handlers.{kind}\n"
        "imported = sorted(m for m in ('anthropic', 'httpx', 'boto3') if m in sys.modules)\n"
        "from loopengine.http import root\n"
        "builds = []\n"
        "build = root.build\n"
        "root.build = lambda *a, **k: builds.append(1) or build(*a, **k)\n"
        "for f, a, k in reversed(before): f(*a, **k)\n"
        "root.engine()\n"
        "snapshot = sorted(m for m in ('anthropic', 'loopengine.models.anthropic') if m in sys.modules)\n"
        "print(json.dumps({'import': imported, 'snapshot': snapshot, 'builds': len(builds)}))\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}
    child = {
        **clean,
        "PYTHONPATH": str(ROOT / "src"),
        "LOOPENGINE_DB": str(tmp_path / "snap.db"),
        "POWERTOOLS_METRICS_NAMESPACE": "loopengine-test",
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_with_a_model_key_the_snapshot_holds_the_model_sdk(tmp_path: Path) -> None:
    out = run_hooks("resume", {"ANTHROPIC_API_KEY": "sk-ant-test"}, tmp_path)
    assert out["import"] == ["boto3"]  # the handler's import: boto3, never the model SDK
    assert out["snapshot"] == ["anthropic", "loopengine.models.anthropic"]
    assert out["builds"] == 1


@pytest.mark.parametrize(
    "env",
    [{}, {"ANTHROPIC_API_KEY": "sk-ant-test", "LOOPENGINE_MODEL": "scripted"}],
    ids=["no-key", "scripted"],
)
def test_without_a_model_the_snapshot_leaves_the_sdk_out(env: dict[str, str], tmp_path: Path) -> None:
    out = run_hooks("api", env, tmp_path)
    assert out == {"import": ["boto3"], "snapshot": [], "builds": 1}


def test_the_api_resolves_through_the_handler_after_a_restore(
    aws: Any, hooks: FakeRuntimeHooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopengine.http import api
    from tests.handler_support import call, load_event, with_body

    monkeypatch.setenv("LOOPENGINE_MODEL", "scripted")
    snapstart.init("api")
    hooks.snapshot()
    hooks.restore()
    invoker = RecordingInvoker()
    root.engine().rt.invoker = invoker  # the test stands in for Lambda's async invoke

    body = {"message": "Order A-1001 arrived broken, please refund it."}
    status, reply = call(api.handler, with_body(load_event("post_message"), body))
    assert status == 202 and reply["status"] == "paused", reply
    pending = reply["pendingItems"][0]["pendingId"]
    status, reply = call(api.handler, load_event("resolve_approve", pendingId=pending))
    assert status in (200, 202) and invoker.invoked, reply


def test_a_failed_api_warm_up_does_not_stop_the_snapshot(
    aws: Any, hooks: FakeRuntimeHooks, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from loopengine.http import openapi

    def broken(_app: Any) -> dict[str, Any]:
        raise RuntimeError("no document")

    monkeypatch.setattr(openapi, "document", broken)
    snapstart.init("api")
    hooks.snapshot()
    assert "api warm-up failed before the snapshot: RuntimeError" in caplog.text
    assert isinstance(root.engine(), Engine)  # the rest of the snapshot was taken
