"""List an agent's MCP servers when a turn starts, so the turn pins the tools it was shown.

:class:`McpAgents` wraps the agent source a runtime reads (the registry): ``get`` is what a new turn
reads its config from, so it is where the servers are listed; the tools join tools.py's with their
pins and the turn's snapshot keeps them. ``code`` is the registry's: a resume rebuilds MCP tools
from the snapshot, not from a listing. :func:`probe` is ``loopengine agents --check``'s look at the
servers (unreachable is a warning there, not an error: a server may be down while a config is fine).
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace

from loopengine.app.runtime import AgentSource
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.mcp import McpConnector, McpNotRun, McpPin, tools_of
from loopengine.authoring.registry import AgentRegistry, AgentStatus
from loopengine.authoring.tools import Tool, ToolFn
from loopengine.domain.base.errors import AgentUnavailable
from loopengine.domain.base.yaml_lines import display

log = logging.getLogger("loopengine.mcp")
PROBE_CONNECT_SECONDS = 2.0
PROBE_SECONDS = 5.0
"""How long ``--check`` waits for a server (a warning, not an error, when it does not answer)."""


class McpAgents:
    """An agent source whose configs carry their MCP servers' tools as listed now."""

    def __init__(self, base: AgentSource, connector: McpConnector) -> None:
        self.base = base
        self.connector = connector

    def get(self, name: str) -> AgentConfig:
        """The current config of ``name`` with its MCP tools listed now (503 when a server is down)."""
        config = self.base.get(name)
        if not config.mcp_servers:
            return config
        return listed(config, self.connector)

    def code(self, name: str) -> dict[str, ToolFn]:
        """Tool implementations by name (tools.py's; MCP tools come back from the snapshot)."""
        return self.base.code(name)


def listed(config: AgentConfig, connector: McpConnector) -> AgentConfig:
    """``config`` with every MCP server's tools listed and pinned; ``AgentUnavailable`` if one is down."""
    tools: list[Tool] = list(config.tools)
    pins: dict[str, McpPin] = {}
    for server in config.mcp_servers:
        try:
            found = tools_of(server, connector.list_tools(server), connector)
        except McpNotRun as exc:
            raise AgentUnavailable(f"agent {config.name!r}: {exc}; try again when it is back") from None
        for note in found.skipped:
            log.warning("agent %s: %s", config.name, note)
        taken = {t.name for t in tools}
        clash = sorted(taken & {t.name for t in found.tools})
        if clash:
            msg = (
                f"agent {config.name!r}: the {server.name} server's tools {clash} clash with its other tools"
            )
            raise AgentUnavailable(msg)
        tools += found.tools
        pins.update(found.pins)
    return replace(config, tools=tuple(tools), mcp_pins=pins)


def probe(config: AgentConfig, connector: McpConnector) -> list[str]:
    """Warnings about ``config``'s MCP servers as they answer now (unreachable, tools left out)."""
    out = []
    for server in config.mcp_servers:
        try:
            found = tools_of(server, connector.list_tools(server), connector)
        except McpNotRun as exc:
            where = server.url or shlex.join(server.command)
            out.append(f"{exc} at {where}: its tools are listed when a turn starts")
            continue
        out += list(found.skipped)
        local = {t.name for t in config.tools}
        out += [
            f"{t.name!r} of the {server.name} server clashes with tools.py"
            for t in found.tools
            if t.name in local
        ]
    return out


def probe_agents(
    registry: AgentRegistry, statuses: Sequence[AgentStatus], env: Mapping[str, str]
) -> list[str]:
    """``agents --check``'s warnings: the MCP servers of each valid agent, listed with short timeouts."""
    from loopengine.mcp.client import McpClient

    connector = McpClient(env, connect_timeout=PROBE_CONNECT_SECONDS, timeout=PROBE_SECONDS)
    out = []
    for status in statuses:
        if status.problems:
            continue
        config = registry.get(status.name)
        where = display(status.folder / "agent.yaml")
        out += [f"warning: {where}: {note}" for note in probe(config, connector)]
    return out
