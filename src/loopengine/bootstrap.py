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
from loopengine.domain.clock import Clock, SystemClock
from loopengine.domain.errors import ConfigError
from loopengine.domain.timings import TIMINGS as TIMINGS
from loopengine.domain.timings import timings as timings
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


class ModelChooser:
    """``LOOPENGINE_MODEL=scripted`` or no API key -> the agent's offline script; else Anthropic."""

    def __init__(self, env: Mapping[str, str], registry: AgentRegistry) -> None:
        choice = env.get("LOOPENGINE_MODEL", "")
        self.offline = choice == "scripted" or not env.get("ANTHROPIC_API_KEY")
        self._registry = registry
        self._env = env
        self._anthropic: ModelClient | None = None
        self._key: str | None = None

    def __call__(self, config: AgentConfig) -> ModelClient:
        """The model client for one agent."""
        if self.offline:
            from loopengine.models.scripted import ScriptedModel

            script = self._registry.script(config.name)
            if script is None:
                raise ConfigError(
                    f"agent {config.name!r} ships no script.py for the offline model; "
                    "set ANTHROPIC_API_KEY to use Anthropic"
                )
            return ScriptedModel(script)
        key = self._env.get("ANTHROPIC_API_KEY") or None  # may come from a secret store, so passed on
        if self._anthropic is None or key != self._key:  # a rotated key gets a new client
            import anthropic

            from loopengine.models.anthropic import DEFAULT_MAX_RETRIES, AnthropicModel

            client = anthropic.Anthropic(api_key=key, max_retries=DEFAULT_MAX_RETRIES)
            self._anthropic, self._key = AnthropicModel(client), key
        return self._anthropic


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
        max_waits=_positive_int(env, "LOOPENGINE_MAX_WAITS", Runtime.max_waits),
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


def _positive_int(env: Mapping[str, str], var: str, default: int) -> int:
    """``env[var]`` as a whole number >= 1 (``default`` when unset); ConfigError when malformed."""
    raw = (env.get(var) or "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{var} must be a whole number of at least 1, not {raw[:40]!r}")
    return int(raw)
