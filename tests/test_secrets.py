"""Secrets read at runtime from Secrets Manager (moto), cached, rotated without a redeploy.

``loopengine.http.secrets.environ()`` answers ``NAME`` from the secret that ``<BASE>_SECRET_ARN`` names,
and plain ``NAME`` where no such variable is set (local use). Through the api handler: Basic
credentials and the magic-link key come from Secrets Manager; a rotated password is taken once the
cache ages out, with the same engine (no new deployment, no cold start).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parameters.constants import DEFAULT_PROVIDERS
from moto import mock_aws

from loopengine.app.invokers import RecordingInvoker
from loopengine.authoring.registry import AgentRegistry
from loopengine.bootstrap import ModelChooser
from loopengine.channels.magic.token import issue_token
from loopengine.domain.base.errors import ConfigError
from loopengine.http import api, secrets
from loopengine.models.anthropic import AnthropicModel
from tests.contract.conftest import fake_session
from tests.handler_support import InstallRoot, load_event, with_auth
from tests.handler_support import call as http

# With tests/test_model_anthropic.py: one pytest-xdist worker imports the Anthropic SDK (about 2 s of CPU)
pytestmark = pytest.mark.xdist_group("anthropic-sdk")

REGION = "us-east-1"


@pytest.fixture
def sm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A moto Secrets Manager; Powertools' providers (and their cached values) start empty."""
    for name, value in {
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    DEFAULT_PROVIDERS.clear()
    with mock_aws():
        yield fake_session().client("secretsmanager")  # one Session: botocore's data parsed once
    DEFAULT_PROVIDERS.clear()


def age_out() -> None:
    """Make every cached secret as old as MAX_AGE: the state a warm function is in minutes later."""
    provider = DEFAULT_PROVIDERS["secrets"]
    for key, entry in list(provider.store.items()):
        provider.store[key] = entry._replace(ttl=datetime.min)


def test_the_arn_variable_convention() -> None:
    assert secrets.arn_variable("LOOPENGINE_ADMIN_AUTH") == "LOOPENGINE_ADMIN_AUTH_SECRET_ARN"
    assert secrets.arn_variable("ANTHROPIC_API_KEY") == "ANTHROPIC_API_KEY_SECRET_ARN"
    assert secrets.arn_variable("LOOPENGINE_MAGIC_LINK_SECRET") == "LOOPENGINE_MAGIC_LINK_SECRET_ARN"
    assert (
        secrets.arn_variable("LOOPENGINE_DEFAULT_WEBHOOK_SECRET") == "LOOPENGINE_DEFAULT_WEBHOOK_SECRET_ARN"
    )


def test_secrets_come_from_secrets_manager_and_win_over_plain_values(sm: Any) -> None:
    arn = sm.create_secret(Name="le/magic", SecretString="from-sm-magic")["ARN"]
    sm.create_secret(Name="le/admin", SecretString="admin:from-sm")
    env = secrets.SecretEnv(
        {
            "LOOPENGINE_MAGIC_LINK_SECRET_ARN": arn,  # a full ARN
            "LOOPENGINE_ADMIN_AUTH_SECRET_ARN": "le/admin",  # or a name
            "LOOPENGINE_ADMIN_AUTH": "admin:stale-plain-value",
            "LOOPENGINE_TABLE": "t",
        }
    )
    assert env["LOOPENGINE_MAGIC_LINK_SECRET"] == "from-sm-magic"
    assert env.get("LOOPENGINE_ADMIN_AUTH") == "admin:from-sm"
    assert env["LOOPENGINE_TABLE"] == "t" and env.get("ANTHROPIC_API_KEY") is None
    assert "LOOPENGINE_MAGIC_LINK_SECRET" in env and "ANTHROPIC_API_KEY" not in env
    assert {"LOOPENGINE_ADMIN_AUTH", "LOOPENGINE_MAGIC_LINK_SECRET", "LOOPENGINE_TABLE"} <= set(env)
    assert len(env) == len(set(env))


def test_plain_variables_work_without_secrets_manager() -> None:
    # no ..._SECRET_ARN: nothing is fetched (no AWS here at all)
    env = secrets.SecretEnv({"LOOPENGINE_ADMIN_AUTH": "admin:local", "LOOPENGINE_ADMIN_AUTH_SECRET_ARN": ""})
    assert env["LOOPENGINE_ADMIN_AUTH"] == "admin:local"


def test_values_are_cached_and_a_rotation_is_read_after_the_cache_ages(sm: Any) -> None:
    sm.create_secret(Name="le/hook", SecretString="v1")
    env = secrets.SecretEnv({"LOOPENGINE_DEFAULT_WEBHOOK_SECRET_ARN": "le/hook"})
    assert env["LOOPENGINE_DEFAULT_WEBHOOK_SECRET"] == "v1"
    sm.put_secret_value(SecretId="le/hook", SecretString="v2")
    assert env["LOOPENGINE_DEFAULT_WEBHOOK_SECRET"] == "v1"  # cached (MAX_AGE)
    age_out()
    assert env["LOOPENGINE_DEFAULT_WEBHOOK_SECRET"] == "v2"


def test_an_unreadable_secret_is_a_config_error_naming_the_variable(sm: Any) -> None:
    env = secrets.SecretEnv({"LOOPENGINE_ADMIN_AUTH_SECRET_ARN": "le/missing"})
    with pytest.raises(ConfigError, match="LOOPENGINE_ADMIN_AUTH") as info:
        env.get("LOOPENGINE_ADMIN_AUTH")
    assert "le/missing" not in str(info.value)


def test_a_binary_secret_that_is_not_text_is_refused(sm: Any) -> None:
    sm.create_secret(Name="le/bin", SecretBinary=b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        secrets.SecretEnv({"ANTHROPIC_API_KEY_SECRET_ARN": "le/bin"})["ANTHROPIC_API_KEY"]


def test_the_api_reads_credentials_and_the_magic_key_from_secrets_manager(
    sm: Any, install_root: InstallRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an api function whose environment names secrets instead of holding them
    sm.create_secret(Name="le/admin", SecretString="admin:first-password")
    sm.create_secret(Name="le/users", SecretString=json.dumps([{"user": "ops", "password": "ops-pw"}]))
    sm.create_secret(Name="le/magic", SecretString="magic-from-sm")
    engine = install_root(
        lambda _engine: RecordingInvoker(),
        LOOPENGINE_ADMIN_AUTH_SECRET_ARN="le/admin",
        LOOPENGINE_USERS_SECRET_ARN="le/users",
        LOOPENGINE_MAGIC_LINK_SECRET_ARN="le/magic",
    )
    monkeypatch.delenv("LOOPENGINE_ADMIN_AUTH")  # nothing secret in the environment
    # THEN Basic auth checks against the secret's value
    assert http(api.handler, with_auth(load_event("list_pending"), "admin", "first-password"))[0] == 200
    assert http(api.handler, with_auth(load_event("list_pending"), "ops", "ops-pw"))[0] == 200
    assert http(api.handler, with_auth(load_event("list_pending"), "admin", "secret"))[0] == 401
    # AND magic links verify with the key from Secrets Manager
    status, paused = http(api.handler, with_auth(load_event("post_message"), "admin", "first-password"))
    assert status == 202, paused
    pending = paused["pendingItems"][0]["pendingId"]
    token = issue_token("magic-from-sm", pending, "r@example.com", engine.rt.stores.clock.now() + 600)
    event = load_event("magic_get")
    event = json.loads(json.dumps(event).replace(event["pathParameters"]["token"], token))
    status, page = http(api.handler, event)
    assert status == 200 and "issue_refund" in page["html"]
    # WHEN the password is rotated, THEN the running function takes it once the cache ages out
    sm.put_secret_value(SecretId="le/admin", SecretString="admin:rotated-password")
    assert http(api.handler, with_auth(load_event("list_pending"), "admin", "first-password"))[0] == 200
    age_out()
    assert http(api.handler, with_auth(load_event("list_pending"), "admin", "rotated-password"))[0] == 200
    assert http(api.handler, with_auth(load_event("list_pending"), "admin", "first-password"))[0] == 401


def test_a_missing_credentials_secret_is_a_clean_error(
    sm: Any, install_root: InstallRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_root(lambda _engine: RecordingInvoker(), LOOPENGINE_ADMIN_AUTH_SECRET_ARN="le/nope")
    monkeypatch.delenv("LOOPENGINE_ADMIN_AUTH")
    status, body = http(api.handler, with_auth(load_event("list_pending"), "admin", "secret"))
    assert (status, body["error"]) == (500, "config_error"), body
    assert "LOOPENGINE_ADMIN_AUTH" in body["message"] and "Traceback" not in body["message"]


def test_the_model_key_from_secrets_manager_reaches_the_sdk_and_a_rotation_gets_a_new_client(
    sm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN no key in the environment, only where to find it
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("LOOPENGINE_MODEL", raising=False)
    sm.create_secret(Name="le/anthropic", SecretString="sk-ant-first")
    env = secrets.SecretEnv({"ANTHROPIC_API_KEY_SECRET_ARN": "le/anthropic"})
    registry = AgentRegistry.from_env({})
    chooser = ModelChooser(env, registry)
    config = registry.get("customer-service")
    # THEN the Anthropic model is chosen, with the secret's key
    first = chooser(config)
    assert isinstance(first, AnthropicModel) and first.client.api_key == "sk-ant-first"
    assert chooser(config) is first  # one client while the key stands
    sm.put_secret_value(SecretId="le/anthropic", SecretString="sk-ant-rotated")
    age_out()
    second = chooser(config)
    assert isinstance(second, AnthropicModel) and second.client.api_key == "sk-ant-rotated"
