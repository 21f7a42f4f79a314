"""``loopengine agents [--check]`` and ``loopengine new-agent NAME``: what the CLI prints for agents."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from loopengine.authoring.registry import AgentRegistry
from loopengine.authoring.scaffold import new_agent, next_steps
from loopengine.domain.base.yaml_lines import display
from loopengine.mcp.agents import probe_agents


def list_agents(env: Mapping[str, str], check: bool = False) -> int:
    """List every agent (broken ones marked with their error); with ``check``, exit 1 on any error.

    ``--check`` prints one ``file:line: message`` per problem (on stdout, for editors and CI),
    warnings about MCP servers that do not answer (on stderr; they fail nothing), then a one-line
    summary.
    """
    registry = AgentRegistry.from_env(env)
    statuses = registry.check()
    path_problems = registry.path_problems()
    broken = [s for s in statuses if s.problems]
    if check:
        for problem in path_problems:
            print(problem)
        for status in broken:
            for p in status.problems:
                print(p)
        for warning in probe_agents(registry, statuses, env):  # a server down: a warning, not a problem
            print(warning, file=sys.stderr)
        count = sum(len(s.problems) for s in broken) + len(path_problems)
        if count:
            print(f"{count} problem(s) in {len(broken)} of {len(statuses)} agent(s)", file=sys.stderr)
            return 1
        names = ", ".join(s.name for s in statuses) or "none found"
        print(f"OK: {len(statuses)} agent(s) valid ({names})")
        return 0
    for problem in path_problems:
        print(f"warning: {problem}", file=sys.stderr)
    width = max((len(s.name) for s in statuses), default=0)
    for status in statuses:
        line = f"{status.name:<{width}}  {display(status.folder)}"
        if status.problems:
            line += f"  BROKEN: {status.problems[0]}"
            more = len(status.problems) - 1
            line += f" (+{more} more; run loopengine agents --check)" if more else ""
        print(line)
    return 0


def default_dir(registry: AgentRegistry) -> tuple[Path, bool]:
    """Where ``new-agent`` writes without ``--dir``, and whether agents there load without setup."""
    cwd = Path.cwd().resolve()
    for root, package in registry.roots():
        if package is not None and root.resolve().is_relative_to(cwd):
            return root, True
    return cwd / "agents", False


def scaffold(env: Mapping[str, str], name: str, where: str | None) -> int:
    """Create the agent folder and print the next steps."""
    registry = AgentRegistry.from_env(env)
    if where is None:
        parent, on_path = default_dir(registry)
    else:
        parent = Path(where)
        on_path = any(parent.resolve() == root.resolve() for root, _ in registry.roots())
    if name in registry.names():
        print(f"loopengine new-agent: an agent named {name!r} already exists", file=sys.stderr)
        return 1
    made = new_agent(name, parent)
    python, loopengine = commands(env)
    print(next_steps(made, on_path, python, loopengine))
    return 0


def commands(env: Mapping[str, str]) -> tuple[str, str]:
    """How the shell that ran us reaches this interpreter and its ``loopengine`` command.

    ``python`` / ``loopengine`` when those names on PATH are these; else their paths (relative to the
    current folder when inside it: ``.venv/bin/python`` after ``make run``, with no venv activated).
    """
    python = Path(sys.executable)
    script = python.parent / "loopengine"
    search = env.get("PATH")
    shown_python = "python" if _found_as("python", python, search) else _shown(python)
    if _found_as("loopengine", script, search):
        return shown_python, "loopengine"
    if script.is_file():
        return shown_python, _shown(script)
    return shown_python, f"{shown_python} -m loopengine.local.cli"


def _found_as(name: str, path: Path, search: str | None) -> bool:
    """``name`` on the PATH ``search`` is ``path`` (compared as written: a venv's python is a link)."""
    found = shutil.which(name, path=search)
    return found is not None and os.path.abspath(found) == os.path.abspath(path)


def _shown(path: Path) -> str:
    absolute = Path(os.path.abspath(path))
    cwd = Path.cwd()
    shown = str(absolute.relative_to(cwd)) if absolute.is_relative_to(cwd) else str(absolute)
    return shlex.quote(shown)
