"""Build a Runtime from an environment mapping: the one place configuration is read.

Callers pass the environment in (``os.environ`` in handlers and the CLI, a dict in tests), so no
module reads the process environment behind anyone's back. Heavy adapters are imported only when
chosen: the SQLite path never imports boto3, the scripted model never imports anthropic, and the
``mcp`` SDK loads only when a turn lists or calls an agent's MCP server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from loopengine.app.ports import ModelClient, Notifier, ResumeInvoker, Stores
from loopengine.app.runtime import Runtime
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.registry import AgentRegistry
from loopengine.domain.base.clock import Clock, SystemClock
from loopengine.domain.base.errors import ConfigError
from loopengine.domain.base.timings import TIMINGS as TIMINGS
from loopengine.domain.base.timings import timings as timings
from loopengine.mcp.agents import McpAgents
from loopengine.mcp.client import McpClient

if TYPE_CHECKING:
    from loopengine.app.engine import Engine

DEFAULT_DB = ".loopengine/loopengine.db"


def open_stores(env: Mapping[str, str], clock: Clock) -> Stores:
    """DynamoDB when ``LOOPENGINE_TABLE`` is set (index shards: ``LOOPENGINE_INDEX_SHARDS``), else SQLite."""
    table = env.get("LOOPENGINE_TABLE")
    if table:
        from loopengine.stores.dynamodb import open_dynamodb_stores  # type: ignore[import-untyped,unused-ignore]
        from loopengine.stores.dynamodb_table import DEFAULT_SHARDS

        shards = _positive_int(env, "LOOPENGINE_INDEX_SHARDS", DEFAULT_SHARDS)
        stores: Stores = open_dynamodb_stores(table, clock, index_shards=shards)
        return stores
    from loopengine.stores.sqlite import open_sqlite_stores

    return open_sqlite_stores(env.get("LOOPENGINE_DB") or DEFAULT_DB, clock)


PROVIDERS = ("anthropic", "bedrock")
"""Where an agent's Claude runs: the Anthropic API, or Amazon Bedrock."""


class ModelChooser:
    """An agent's model client, by provider (agent.yaml ``provider:``, else ``LOOPENGINE_MODEL_PROVIDER``).

    ``LOOPENGINE_MODEL=scripted`` -> the agent's offline script, always. Otherwise ``anthropic``: the
    Anthropic API when ``ANTHROPIC_API_KEY`` is set, else the offline script (everything runs offline);
    ``bedrock``: Claude on Amazon Bedrock with the process's AWS credentials (the function's role) in
    ``AWS_REGION``, no key; the model is ``LOOPENGINE_BEDROCK_MODEL`` when set (the one the template
    lets the role invoke), else the agent's ``model:``. The offline script streams its text a word
    every ``LOOPENGINE_SCRIPTED_DELAY`` seconds (``loopengine dev``: 0.03; default 0). The agent's
    ``prompt_cache`` goes with each client; one SDK client per provider serves every agent.
    """

    def __init__(self, env: Mapping[str, str], registry: AgentRegistry) -> None:
        self.scripted = env.get("LOOPENGINE_MODEL", "") == "scripted"
        self.offline = self.scripted or not env.get("ANTHROPIC_API_KEY")
        """True when an ``anthropic`` agent gets the offline script."""
        self.provider = (env.get("LOOPENGINE_MODEL_PROVIDER") or "anthropic").strip().lower()
        if self.provider not in PROVIDERS:
            wrong = self.provider[:40]
            raise ConfigError(f"LOOPENGINE_MODEL_PROVIDER must be anthropic or bedrock, not {wrong!r}")
        self.delay = _seconds(env, "LOOPENGINE_SCRIPTED_DELAY")
        self._registry = registry
        self._env = env
        self._anthropic: Any = None
        self._bedrock: Any = None
        self._key: str | None = None
        self._models: dict[tuple[object, ...], ModelClient] = {}

    def __call__(self, config: AgentConfig) -> ModelClient:
        """The model client for one agent."""
        provider = config.provider or self.provider
        if self.scripted or (provider == "anthropic" and self.offline):
            return self._scripted(config)
        from loopengine.models.anthropic import BEDROCK, DEFAULT_MAX_RETRIES, AnthropicModel, bedrock_client

        if provider == "bedrock":
            if self._bedrock is None:
                region = self._env.get("AWS_REGION") or self._env.get("AWS_DEFAULT_REGION")
                base_url = self._env.get("ANTHROPIC_BEDROCK_BASE_URL")
                self._bedrock = bedrock_client(region, base_url, DEFAULT_MAX_RETRIES)
            client, model, service = self._bedrock, self._env.get("LOOPENGINE_BEDROCK_MODEL") or None, BEDROCK
        else:
            key = self._env.get("ANTHROPIC_API_KEY") or None  # may come from a secret store, so passed on
            if self._anthropic is None or key != self._key:  # a rotated key gets a new client
                import anthropic

                self._anthropic = anthropic.Anthropic(api_key=key, max_retries=DEFAULT_MAX_RETRIES)
                self._key = key
                self._models.clear()
            client, model, service = self._anthropic, None, "Anthropic API"
        wanted = (provider, config.prompt_cache, model)
        if wanted not in self._models:
            cache = config.prompt_cache
            self._models[wanted] = AnthropicModel(client, cache=cache, model=model, service=service)
        return self._models[wanted]

    def _scripted(self, config: AgentConfig) -> ModelClient:
        from loopengine.models.scripted import ScriptedModel

        script = self._registry.script(config.name)
        if script is None:
            raise ConfigError(
                f"agent {config.name!r} ships no script.py for the offline model; "
                "set ANTHROPIC_API_KEY to use Anthropic"
            )
        return ScriptedModel(script, delay=self.delay)


class NotifierChooser:
    """The notifier of one target: the agent's own block wins; else the deployment default webhook (if any).

    Delivery asks for each target of a turn's pinned config in turn (``config.for_target(target)``);
    a config with several targets has no one notifier (``ConfigError``). Notifiers are built once
    per target block as written, so a turn paused under an older config keeps the targets that
    config names while new turns get the edited ones; a block that fails to build is tried again.
    """

    def __init__(self, env: Mapping[str, str], clock: Clock) -> None:
        self._env = env
        self._clock = clock
        self._cache: dict[str, Notifier | None] = {}

    def __call__(self, config: AgentConfig) -> Notifier | None:
        """The notifier for a config naming one target (built once per block)."""
        targets = config.targets()
        if len(targets) != 1:
            keys = ", ".join(t.key for t in targets)
            raise ConfigError(f"agent {config.name!r} has several notifier targets ({keys}): ask for one")
        block = targets[0].block
        key = json.dumps(block, sort_keys=True, separators=(",", ":"))
        if key not in self._cache:
            self._cache[key] = self._build(block)
        return self._cache[key]

    def _build(self, block: dict[str, Any] | None) -> Notifier | None:
        if not block:
            from loopengine.channels.webhook.send import from_env

            return from_env(self._env, self._clock)
        from loopengine.channels.base import build

        return build(block, self._env, self._clock)


def build_runtime(
    env: Mapping[str, str],
    *,
    invoker: ResumeInvoker,
    stores: Stores | None = None,
    clock: Clock | None = None,
    registry: AgentRegistry | None = None,
) -> Runtime:
    """Assemble the runtime for this process from ``env`` (timings: see :func:`timings`)."""
    clock = clock or SystemClock()
    registry = registry or AgentRegistry.from_env(env)
    tuned = timings(env)
    mcp = McpClient(env)
    return Runtime(
        stores=stores or open_stores(env, clock),
        agents=McpAgents(registry, mcp),
        mcp=mcp,
        model_for=ModelChooser(env, registry),
        notifier_for=NotifierChooser(env, clock),
        invoker=invoker,
        public_url=env.get("LOOPENGINE_PUBLIC_URL", "http://127.0.0.1:8787"),
        code_version=env.get("LOOPENGINE_RESUME_VERSION") or None,
        lease_seconds=tuned.get("lease_seconds", Runtime.lease_seconds),
        handoff_grace=tuned.get("handoff_grace", Runtime.handoff_grace),
        model_retry_seconds=tuned.get("model_retry_seconds", Runtime.model_retry_seconds),
        sweep_batch=_positive_int(env, "LOOPENGINE_SWEEP_BATCH", Runtime.sweep_batch),
        max_waits=_positive_int(env, "LOOPENGINE_MAX_WAITS", Runtime.max_waits),
        tenant_daily_tokens=_positive_int(env, "LOOPENGINE_TENANT_DAILY_TOKENS", 0) or None,
    )


def build_engine(
    env: Mapping[str, str] | None = None,
    *,
    stores: Stores | None = None,
    clock: Clock | None = None,
    registry: AgentRegistry | None = None,
    invoker: ResumeInvoker | None = None,
) -> Engine:
    """The engine for an application that embeds loopengine (docs/python.md).

    ``env`` holds the settings by their environment names (default: ``os.environ``). Without an
    ``invoker`` a resume runs inline, in the call that empties a checkpoint's ``outstanding``: right for
    a script or a test; a server passes a :class:`~loopengine.app.invokers.ThreadInvoker` or its own queue.
    """
    import os

    from loopengine.app.engine import Engine
    from loopengine.app.invokers import InlineInvoker

    inline = InlineInvoker() if invoker is None else None
    engine = Engine(
        build_runtime(
            os.environ if env is None else env,
            invoker=invoker or inline,  # type: ignore[arg-type]
            stores=stores,
            clock=clock,
            registry=registry,
        )
    )
    if inline is not None:
        inline.resume = engine.resume
    return engine


def _seconds(env: Mapping[str, str], var: str) -> float:
    """``env[var]`` as seconds between 0 and 1 (0 when unset); ConfigError when malformed."""
    raw = (env.get(var) or "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{var} must be seconds between 0 and 1, not {raw[:40]!r}")
    return value


def _positive_int(env: Mapping[str, str], var: str, default: int) -> int:
    """``env[var]`` as a whole number >= 1 (``default`` when unset); ConfigError when malformed."""
    raw = (env.get(var) or "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{var} must be a whole number of at least 1, not {raw[:40]!r}")
    return int(raw)
