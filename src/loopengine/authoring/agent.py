"""Agent configuration: what a turn runs under, its snapshot and hash, and loading from a folder.

An agent lives in one folder (see docs/agents.md): ``agent.yaml`` (name, model, system prompt,
tools, policies, optional notifier targets), ``rules.yaml`` (the gate) and ``tools.py`` (``TOOLS``, a list
of :class:`~loopengine.authoring.tools.Tool`). ``script.py`` may add ``respond`` for the offline scripted
model. :mod:`.agent_loader` reads a folder; :mod:`.registry` finds them.

A turn stores :meth:`AgentConfig.snapshot` under its hash when it starts and resumes under that
snapshot: the prompt, model, tool schemas and rules a human approved against are the ones that
finish the turn; only tool *code* is looked up by name at resume time. The notifier targets are
part of the snapshot too: a turn's notifications go where its config said when it started.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from loopengine.authoring.agent_schema import AgentFile
from loopengine.authoring.context import DEFAULT_TOOL_TIMEOUT
from loopengine.authoring.mcp import McpConnector, McpPin, McpServer, executor, servers_from_snapshot
from loopengine.authoring.targets import DEFAULT_KEY, NotifierTarget, targets_of
from loopengine.authoring.tools import ASK_USER_SPEC, Tool, ToolFn
from loopengine.domain.base.errors import ConfigError
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.gate import RuleSet
from loopengine.domain.policy import Expiry, ModelRetry
from loopengine.domain.rules import RulesFile
from loopengine.domain.tokens.context_window import ContextPolicy
from loopengine.domain.tokens.usage import DEFAULT_PROMPT_CACHE, PromptCache


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Everything a turn runs under.

    ``notifier`` / ``notifiers``: agent.yaml's blocks as written (at most one of them); see
    :meth:`targets`.
    """

    name: str
    model: str
    system: str
    tools: tuple[Tool, ...]
    rules: RuleSet
    max_tokens: int = 1024
    max_iterations: int = 10
    notifier: JsonDict | None = None
    on_new_message: str = "supersede"
    expiry: Expiry | None = None
    extra: JsonDict = field(default_factory=dict)
    live_wait: float | None = None
    notifiers: list[JsonDict] | None = None
    mcp_servers: tuple[McpServer, ...] = ()
    mcp_pins: dict[str, McpPin] = field(default_factory=dict)
    model_retry: ModelRetry | None = None
    """``model_retry:`` (attempts, first and longest wait); None: the deployment's defaults."""
    """The MCP tools among ``tools``, by name: their server, the server's name and the pinned hash."""
    prompt_cache: PromptCache = DEFAULT_PROMPT_CACHE
    """``prompt_cache:``: cache breakpoints on the prompt (default: on, 5 minutes)."""
    provider: str | None = None
    """``provider:`` ``anthropic`` or ``bedrock``; None: the deployment's (``LOOPENGINE_MODEL_PROVIDER``)."""
    context: ContextPolicy | None = None
    """``context:`` (window, threshold, strategy); None: the defaults of ``ContextPolicy``."""

    def targets(self) -> tuple[NotifierTarget, ...]:
        """Where this config's notifications go: ``t0``, ``t1``, ... (one, the default, if it names none)."""
        return targets_of(self.notifier, self.notifiers)

    def target(self, key: str | None) -> NotifierTarget:
        """The target ``key`` (``None``: ``t0``, what a record written before targets had keys meant)."""
        wanted = key or DEFAULT_KEY
        found = next((t for t in self.targets() if t.key == wanted), None)
        if found is None:
            raise ConfigError(f"agent {self.name!r}: this config has no notifier target {wanted!r}")
        return found

    def for_target(self, target: NotifierTarget) -> AgentConfig:
        """The config with ``target`` as its only notifier: what ``Runtime.notifier_for`` builds from.

        (A view for building one target's notifier; its :meth:`config_hash` is not the turn's.)
        """
        return replace(self, notifier=target.block or None, notifiers=None)

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, if the agent has it."""
        return next((t for t in self.tools if t.name == name), None)

    def timeout_of(self, name: str) -> float:
        """Seconds one call of tool ``name`` may run (agent.yaml, else the Tool's own, else the default)."""
        tool = self.tool(name)
        return tool.timeout if tool is not None and tool.timeout is not None else DEFAULT_TOOL_TIMEOUT

    def tool_specs(self) -> list[JsonDict]:
        """The ``tools`` list sent to the model, built-in ``system_ask_user`` last."""
        return [t.spec() for t in self.tools] + [ASK_USER_SPEC]

    def snapshot(self) -> JsonDict:
        """Everything that governs behaviour except tool code, as plain JSON."""
        return {
            "name": self.name,
            "model": self.model,
            "system": self.system,
            "max_tokens": self.max_tokens,
            "max_iterations": self.max_iterations,
            "tools": [self._entry(t) for t in self.tools],
            **({"mcp_servers": [s.to_dict() for s in self.mcp_servers]} if self.mcp_servers else {}),
            "rules": self.rules.source,
            "notifier": self.notifier,
            **({"notifiers": self.notifiers} if self.notifiers is not None else {}),
            "on_new_message": self.on_new_message,
            **(
                {"pending_ttl": self.expiry.ttl_seconds, "on_expiry": self.expiry.on_expiry}
                if self.expiry
                else {}
            ),
            "extra": self.extra,
            **({"live_wait": self.live_wait} if self.live_wait is not None else {}),
            **({"tool_timeouts": timeouts} if (timeouts := self._timeouts()) else {}),
            **({"model_retry": self.model_retry.to_dict()} if self.model_retry else {}),
            **(
                {"prompt_cache": self.prompt_cache.to_dict()}
                if self.prompt_cache != DEFAULT_PROMPT_CACHE
                else {}
            ),
            **({"provider": self.provider} if self.provider is not None else {}),
            **({"context": self.context.to_dict()} if self.context else {}),
        }

    def _entry(self, tool: Tool) -> JsonDict:
        """A tool's snapshot entry: its spec, and for an MCP tool its pin."""
        pin = self.mcp_pins.get(tool.name)
        return {**tool.spec(), "mcp": pin.to_dict()} if pin is not None else tool.spec()

    def _timeouts(self) -> dict[str, float]:
        """Tools' timeouts that are set (the default is left out, so it moves no config hash)."""
        return {t.name: t.timeout for t in self.tools if t.timeout is not None}

    def config_hash(self) -> str:
        """Content hash of :meth:`snapshot`."""
        return snapshot_hash(self.snapshot())


def snapshot_hash(snapshot: JsonDict) -> str:
    """``sha256:`` + hex digest of the canonical JSON of a snapshot."""
    canonical = json.dumps(snapshot, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def from_snapshot(
    snapshot: JsonDict, code: dict[str, ToolFn], mcp: McpConnector | None = None
) -> AgentConfig:
    """Rebuild a config from a stored snapshot; tool code comes from ``code`` by name.

    A tool whose code no longer exists still has its schema (the model saw it); calling it
    yields an error result instead of running something else. An MCP tool runs through ``mcp``
    under its pin (server, tool, hash), without listing the server again.
    """
    tools = []
    timeouts = snapshot.get("tool_timeouts") or {}
    servers = servers_from_snapshot(snapshot)
    pins = {s["name"]: McpPin.from_dict(s["mcp"]) for s in snapshot["tools"] if s.get("mcp")}
    for spec in snapshot["tools"]:
        pin = pins.get(spec["name"])
        fn = (
            executor(servers.get(pin.server), pin, mcp)
            if pin
            else code.get(spec["name"]) or _missing(spec["name"])
        )
        timeout = timeouts.get(spec["name"])
        tools.append(Tool(spec["name"], spec["description"], spec["input_schema"], fn, timeout))
    return AgentConfig(
        name=snapshot["name"],
        model=snapshot["model"],
        system=snapshot["system"],
        tools=tuple(tools),
        rules=RuleSet.from_dict(snapshot["rules"]),
        max_tokens=int(snapshot["max_tokens"]),
        max_iterations=int(snapshot["max_iterations"]),
        notifier=snapshot.get("notifier"),
        on_new_message=snapshot.get("on_new_message", "supersede"),
        expiry=Expiry.parse(snapshot, "snapshot"),
        extra=dict(snapshot.get("extra") or {}),
        live_wait=snapshot.get("live_wait"),
        notifiers=snapshot.get("notifiers"),
        mcp_servers=tuple(servers.values()),
        mcp_pins=pins,
        model_retry=ModelRetry.from_dict(snapshot["model_retry"]) if snapshot.get("model_retry") else None,
        prompt_cache=PromptCache.from_dict(snapshot["prompt_cache"])
        if snapshot.get("prompt_cache")
        else DEFAULT_PROMPT_CACHE,
        provider=snapshot.get("provider"),
        context=ContextPolicy.from_dict(snapshot["context"]) if snapshot.get("context") else None,
    )


def _missing(name: str) -> ToolFn:
    def run(_args: JsonDict) -> Any:
        raise ConfigError(f"tool {name!r} no longer exists in this deployment")

    return run


def build_config(
    agent: AgentFile, raw_agent: JsonDict, rules: RulesFile, raw_rules: JsonDict, tools: list[Tool]
) -> AgentConfig:
    """The config of validated agent.yaml / rules.yaml content (``raw_*`` as written) and its tools.

    The raw rules and notifier blocks are what the snapshot keeps (``notifiers`` only when given, so
    the hash of a folder without it is what it was before targets), so the config hash of a folder
    does not depend on how this version of the code models them. A tool's timeout in agent.yaml
    (``tool_timeouts:``) wins over the one its Tool sets.
    """
    timeouts = agent.tool_timeouts or {}
    tools = [replace(t, timeout=timeouts[t.name]) if t.name in timeouts else t for t in tools]
    return AgentConfig(
        name=agent.name,
        model=agent.model,
        system=agent.system,
        tools=tuple(tools),
        rules=RuleSet.from_model(rules, raw_rules),
        max_tokens=agent.max_tokens,
        max_iterations=agent.max_iterations,
        notifier=raw_agent.get("notifier"),
        on_new_message=agent.on_new_message,
        expiry=Expiry(agent.pending_ttl, agent.on_expiry or "unknown")
        if agent.pending_ttl is not None
        else None,
        live_wait=agent.live_wait,
        notifiers=raw_agent.get("notifiers"),
        mcp_servers=tuple(McpServer.from_model(m) for m in agent.mcp_servers or ()),
        model_retry=ModelRetry(r.attempts, r.first_wait, r.max_wait) if (r := agent.model_retry) else None,
        prompt_cache=PromptCache(c.enabled, c.ttl) if (c := agent.prompt_cache) else DEFAULT_PROMPT_CACHE,
        provider=agent.provider,
        context=ContextPolicy(w.window_tokens, w.compact_at, w.strategy) if (w := agent.context) else None,
    )
