"""Find agents: one folder per agent, under the ``agents`` package and ``LOOPENGINE_AGENTS_PATH``.

Isolation: a broken folder (bad YAML, bad rules, a tools.py that does not import) makes only that
agent unavailable (:class:`~loopengine.domain.base.errors.AgentUnavailable`, 503 with ``file:line``); the scan
never raises for it and every other agent keeps working.

Freshness: every :meth:`AgentRegistry.get` re-reads the agent's agent.yaml and rules.yaml (two
small reads) and re-validates them when their content changed, and the folder scan notices new,
removed and renamed agents by stat. So every process (every ``loopengine dev`` worker) serves what
is on disk now; turns already started keep their snapshot (``config_hash``). Python code
(tools.py, script.py) is imported once per process: changing it needs a restart, except that a
tools.py that failed to import is retried once the file changes.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.agent_code import import_module, import_problem, load_tools
from loopengine.authoring.agent_loader import FolderText, parse_folder, route_name
from loopengine.authoring.tools import ToolFn
from loopengine.domain.base.errors import AgentUnavailable, NotFound
from loopengine.domain.base.yaml_lines import Problem, display, unavailable

PATH_ENV = "LOOPENGINE_AGENTS_PATH"
Signature = tuple[int, int, int, int] | None


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """Where an agent lives; ``problem`` is set when its name is taken by another folder too."""

    name: str
    folder: Path
    package: str | None
    problem: Problem | None = None


@dataclass(frozen=True, slots=True)
class AgentStatus:
    """One agent folder as ``loopengine agents`` reports it."""

    name: str
    folder: Path
    problems: tuple[Problem, ...] = ()


@dataclass
class _Loaded:
    key: tuple[FolderText, Signature]
    config: AgentConfig | None = None
    error: AgentUnavailable | None = None


@dataclass(frozen=True, slots=True)
class _State:
    names: dict[Path, tuple[Signature, str, int]] = field(default_factory=dict)
    loaded: dict[Path, _Loaded] = field(default_factory=dict)


def _signature(path: Path) -> Signature:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


class AgentRegistry:
    """Agents by route name (the ``name`` in agent.yaml)."""

    def __init__(self, package: str | None = "agents", paths: Iterable[str | Path] = ()) -> None:
        self._package = package
        self._paths = [Path(p) for p in paths]
        self._state = _State()
        self._lock = threading.RLock()

    @classmethod
    def from_env(cls, env: Mapping[str, str], package: str | None = "agents") -> AgentRegistry:
        """The ``agents`` package plus every folder in ``LOOPENGINE_AGENTS_PATH`` (``:``-separated)."""
        return cls(package, [p for p in env.get(PATH_ENV, "").split(os.pathsep) if p.strip()])

    def roots(self) -> list[tuple[Path, str | None]]:
        """Folders holding agent folders, with the package their code imports under (None: by path)."""
        found: list[tuple[Path, str | None]] = []
        spec = importlib.util.find_spec(self._package) if self._package else None
        if spec is not None and spec.submodule_search_locations:
            found += [(Path(base), self._package) for base in spec.submodule_search_locations]
        return found + [(p, None) for p in self._paths]

    def path_problems(self) -> list[str]:
        """``LOOPENGINE_AGENTS_PATH`` entries that are not folders."""
        return [f"{PATH_ENV}: {display(p)} is not a folder" for p in self._paths if not p.is_dir()]

    def entries(self) -> list[AgentEntry]:
        """Every agent folder found now (two folders with one name are both marked)."""
        with self._lock:
            by_name: dict[str, list[tuple[Path, str | None, int]]] = {}
            for folder, package in self._folders():
                sig = _signature(folder / "agent.yaml")
                known = self._state.names.get(folder)
                if known is None or known[0] != sig:
                    name, line = route_name(folder, FolderText.read(folder).agent)
                    known = self._state.names[folder] = (sig, name, line)
                by_name.setdefault(known[1], []).append((folder, package, known[2]))
        out = []
        for name, places in sorted(by_name.items()):
            for folder, package, line in places:
                others = [display(f / "agent.yaml") for f, _, _ in places if f != folder]
                problem = None
                if others:
                    msg = f"name: {name!r} is also the name of {', '.join(others)}; names must be unique"
                    problem = Problem(display(folder / "agent.yaml"), line, msg)
                out.append(AgentEntry(name, folder, package, problem))
        return out

    def _folders(self) -> list[tuple[Path, str | None]]:
        found = []
        for root, package in self.roots():
            try:
                children = sorted(os.scandir(root), key=lambda d: d.name)
            except OSError:
                continue
            for child in children:
                if not child.name.startswith((".", "_")) and os.path.isfile(
                    os.path.join(child.path, "agent.yaml")
                ):
                    found.append((Path(child.path), package))
        return found

    def names(self) -> list[str]:
        """All agent route names (broken agents included: they answer 503, not 404)."""
        return sorted({e.name for e in self.entries()})

    def _entry(self, name: str) -> AgentEntry:
        matches = [e for e in self.entries() if e.name == name]
        if not matches:
            raise NotFound(f"no agent named {name!r}")
        problems = [e.problem for e in matches if e.problem is not None]
        if problems:
            raise unavailable(problems)
        return matches[0]

    def get(self, name: str) -> AgentConfig:
        """The current config of agent ``name``: NotFound if none, AgentUnavailable if broken."""
        entry = self._entry(name)
        config = self._load(entry)
        if config.name != name:  # renamed between the scan and the read
            raise NotFound(f"no agent named {name!r}")
        return config

    def _load(self, entry: AgentEntry) -> AgentConfig:
        key = (FolderText.read(entry.folder), _signature(entry.folder / "tools.py"))
        with self._lock:
            cached = self._state.loaded.get(entry.folder)
            if cached is None or cached.key != key:
                cached = _Loaded(key)
                tools, problems = load_tools(entry.folder, entry.package)
                try:
                    cached.config = parse_folder(entry.folder, key[0], tools, problems)
                except AgentUnavailable as exc:
                    cached.error = exc
                self._state.loaded[entry.folder] = cached
        if cached.error is not None:
            raise cached.error
        assert cached.config is not None
        return cached.config

    def code(self, name: str) -> dict[str, ToolFn]:
        """Tool implementations by name (resuming a snapshot needs only tools.py, not the YAML)."""
        entry = self._entry(name)
        with self._lock:
            tools, problems = load_tools(entry.folder, entry.package)
        if problems:
            raise unavailable(problems)
        return {t.name: t.execute for t in tools}

    def script(self, name: str) -> Callable[..., Any] | None:
        """The agent's offline script (``script.respond``), if it ships one."""
        entry = self._entry(name)
        path = entry.folder / "script.py"
        if not path.is_file():
            return None
        try:
            with self._lock:
                module = import_module(entry.folder, entry.package, "script")
        except (Exception, SystemExit) as exc:
            raise unavailable([import_problem(path, exc)]) from None
        fn = getattr(module, "respond", None)
        return fn if callable(fn) else None

    def check(self) -> list[AgentStatus]:
        """Load every agent folder (and its script.py) and report what is wrong with each."""
        out = []
        for entry in self.entries():
            found: Sequence[Problem] = [entry.problem] if entry.problem else []
            if not found:
                try:
                    self._load(entry)
                    script = entry.folder / "script.py"
                    if script.is_file() and self.script(entry.name) is None:
                        found = [Problem(display(script), 1, "defines no respond(request) function")]
                except AgentUnavailable as exc:
                    found = [p for p in exc.problems if isinstance(p, Problem)]
            out.append(AgentStatus(entry.name, entry.folder, tuple(found)))
        return out
