"""Read one agent folder into an :class:`~.agent.AgentConfig`, or say exactly what is wrong.

Every problem of every file is collected (agent.yaml, rules.yaml, tools.py and how they fit
together) and raised at once as :class:`~loopengine.domain.base.errors.AgentUnavailable`, each problem as
``file:line: path: message``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from loopengine.authoring.agent import AgentConfig, build_config
from loopengine.authoring.agent_schema import AgentFile, cross_check, target_problems
from loopengine.authoring.tools import Tool
from loopengine.domain.base.errors import AgentUnavailable
from loopengine.domain.base.yaml_lines import Lines, Problem, display, load, unavailable
from loopengine.domain.rules import RulesFile, problems

_NAME_LINE = re.compile(r"""^name:\s*["']?([A-Za-z0-9_-]+)["']?\s*(?:#.*)?$""", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class FolderText:
    """The YAML files of a folder as read at one moment (``None``: the file does not exist)."""

    agent: str | None
    rules: str | None

    @staticmethod
    def read(folder: Path) -> FolderText:
        """Read both files now (bytes that are not UTF-8 are reported when parsed)."""
        return FolderText(_read(folder / "agent.yaml"), _read(folder / "rules.yaml"))


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", errors="surrogateescape")
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"\0cannot read: {exc.strerror}"


def route_name(folder: Path, text: str | None) -> tuple[str, int]:
    """The name an agent folder answers to (and its line): agent.yaml's ``name``, even when broken.

    When the file cannot be parsed at all, a ``name:`` line still names it; failing that, the
    folder name (``returns_desk`` -> ``returns-desk``), so requests to it get a 503 with the error.
    """
    try:
        data, lines = load(folder / "agent.yaml", _checked(folder / "agent.yaml", text))
    except AgentUnavailable:
        data, lines = None, Lines()
    if isinstance(data, dict) and isinstance(data.get("name"), str) and data["name"]:
        return str(data["name"]), lines.line(("name",))
    match = _NAME_LINE.search(text or "")
    if match:
        return match.group(1), (text or "").count("\n", 0, match.start()) + 1
    return folder.name.replace("_", "-"), 1


def parse_folder(
    folder: Path, text: FolderText, tools: list[Tool], tool_problems: list[Problem]
) -> AgentConfig:
    """Validate the folder's files against each other; ``AgentUnavailable`` lists every problem."""
    found = list(tool_problems)
    agent_path, rules_path = folder / "agent.yaml", folder / "rules.yaml"
    agent_file, rules_file = display(agent_path), display(rules_path)
    agent, raw_agent, agent_lines = _model(agent_path, _checked(agent_path, text.agent), AgentFile, found)
    rules, rules_lines = RulesFile(), Lines()
    raw_rules: dict[str, Any] = {}
    if text.rules is not None:
        parsed, raw_rules, rules_lines = _model(
            rules_path, _checked(rules_path, text.rules), RulesFile, found
        )
        rules = parsed if isinstance(parsed, RulesFile) else rules
    if not isinstance(agent, AgentFile):
        raise unavailable(found)
    names: list[str] = []
    if not tool_problems:
        names, mismatched = cross_check(
            agent, (agent_file, agent_lines), rules, (rules_file, rules_lines), [t.name for t in tools]
        )
        found += mismatched
    elif agent.tools is not None:  # tools.py is broken: still check the rules against agent.yaml's list
        found += cross_check(agent, (agent_file, agent_lines), rules, (rules_file, rules_lines), agent.tools)[
            1
        ]
    else:  # neither tools.py nor a tools list says what the tools are: check the targets' shape alone
        found += target_problems(agent, (agent_file, agent_lines), None)
    if found:
        raise unavailable(found)
    by_name = {t.name: t for t in tools}
    return build_config(agent, raw_agent, rules, raw_rules, [by_name[n] for n in names])


def _checked(path: Path, text: str | None) -> str:
    if text is None:
        raise unavailable([Problem(display(path), 1, "missing")])
    if text.startswith("\0"):
        raise unavailable([Problem(display(path), 1, text[1:])])
    if any("\udc80" <= c <= "\udcff" for c in text):
        raise unavailable([Problem(display(path), 1, "is not UTF-8 text")])
    return text


def _model(
    path: Path, text: str, model: type[BaseModel], found: list[Problem]
) -> tuple[BaseModel | None, dict[str, Any], Lines]:
    """Parse and validate one file, adding its problems to ``found``."""
    try:
        data, lines = load(path, text)
    except AgentUnavailable as exc:
        found.extend(exc.problems)
        return None, {}, Lines()
    if data is None and model is RulesFile:
        data = {}
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        found.extend(problems(exc, model, display(path), lines))
        return None, data if isinstance(data, dict) else {}, lines
    return parsed, data, lines
