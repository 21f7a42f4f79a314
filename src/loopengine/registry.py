"""Find agents: one folder per agent under a package (``agents`` by default).

Importing an agent's ``tools.py`` is deferred until the agent is first used, so a route that
touches one agent never pays for the others.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from loopengine.agent import AgentConfig, parse_agent
from loopengine.errors import ConfigError, NotFound
from loopengine.tools import ToolFn


@dataclass(frozen=True)
class AgentEntry:
    """Where an agent lives."""

    name: str
    folder: Path
    module: str


class AgentRegistry:
    """Agents by route name (the ``name`` in agent.yaml)."""

    def __init__(self, package: str = "agents") -> None:
        self._package = package
        self._entries: dict[str, AgentEntry] | None = None
        self._configs: dict[str, AgentConfig] = {}

    def _scan(self) -> dict[str, AgentEntry]:
        if self._entries is None:
            spec = importlib.util.find_spec(self._package)
            if spec is None or not spec.submodule_search_locations:
                raise ConfigError(f"agent package {self._package!r} not found")
            entries = {}
            for base in spec.submodule_search_locations:
                for yml in sorted(Path(base).glob("*/agent.yaml")):
                    raw = yaml.safe_load(yml.read_text()) or {}
                    name = raw.get("name") if isinstance(raw, dict) else None
                    if not isinstance(name, str):
                        raise ConfigError(f"{yml}: agent.yaml needs a 'name'")
                    module = f"{self._package}.{yml.parent.name}"
                    entries[name] = AgentEntry(name, yml.parent, module)
            self._entries = entries
        return self._entries

    def names(self) -> list[str]:
        """All agent route names."""
        return sorted(self._scan())

    def get(self, name: str) -> AgentConfig:
        """The current config of agent ``name`` (NotFound if there is none)."""
        if name not in self._configs:
            entry = self._scan().get(name)
            if entry is None:
                raise NotFound(f"no agent named {name!r}")
            tools_mod = importlib.import_module(f"{entry.module}.tools")
            raw = yaml.safe_load((entry.folder / "agent.yaml").read_text())
            rules_file = entry.folder / "rules.yaml"
            rules = yaml.safe_load(rules_file.read_text()) if rules_file.exists() else None
            self._configs[name] = parse_agent(raw, rules, list(tools_mod.TOOLS), str(entry.folder))
        return self._configs[name]

    def code(self, name: str) -> dict[str, ToolFn]:
        """Tool implementations of agent ``name`` by tool name (for resuming a snapshot)."""
        return {t.name: t.execute for t in self.get(name).tools}

    def script(self, name: str) -> Callable[..., Any] | None:
        """The agent's offline script (``script.respond``), if it ships one."""
        entry = self._scan().get(name)
        if entry is None:
            raise NotFound(f"no agent named {name!r}")
        if importlib.util.find_spec(f"{entry.module}.script") is None:
            return None
        mod: ModuleType = importlib.import_module(f"{entry.module}.script")
        fn = getattr(mod, "respond", None)
        return fn if callable(fn) else None
