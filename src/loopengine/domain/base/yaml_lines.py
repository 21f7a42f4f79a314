"""Read a YAML config file and remember the line of every key, so errors can say ``file:line``.

:func:`load` returns the data (as ``yaml.safe_load`` builds it) plus :class:`Lines`, a map from a
path into the data (``("rules", 1, "approver")``) to the 1-based line it is written on. Syntax
errors and duplicate keys (which ``safe_load`` silently resolves to the last one) raise
:class:`~loopengine.domain.base.errors.AgentUnavailable` listing each :class:`Problem` with its line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from loopengine.domain.base.errors import AgentUnavailable

Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with one file: rendered ``file:line: message``."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


def unavailable(problems: Sequence[Problem]) -> AgentUnavailable:
    """The error for an agent folder with ``problems`` (its message lists them all)."""
    return AgentUnavailable("; ".join(str(p) for p in problems), problems)


@dataclass(frozen=True, slots=True)
class Lines:
    """Line numbers of a document's keys and list items, by path (the dict fills as the document is read)."""

    at: dict[Loc, int] = field(default_factory=dict)

    def line(self, loc: Sequence[str | int]) -> int:
        """The line of ``loc``, else of its nearest enclosing key or item that has one (else 1)."""
        path = tuple(loc)
        while path:
            if path in self.at:
                return self.at[path]
            path = path[:-1]
        return self.at.get((), 1)


def display(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it, else absolute."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(Path.cwd()))
    except ValueError:
        return str(resolved)


def load(path: Path, text: str | None = None) -> tuple[Any, Lines]:
    """Parse ``path`` (or ``text``, its content); ``AgentUnavailable`` on bad YAML."""
    name = display(path)
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise unavailable([Problem(name, 1, f"cannot read: {_reason(exc)}")]) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        what = ": ".join(p for p in (exc.context, exc.problem) if p) or "not valid YAML"
        raise unavailable([Problem(name, line, f"YAML syntax error: {what}")]) from None
    except yaml.YAMLError as exc:
        raise unavailable([Problem(name, 1, f"YAML syntax error: {exc}")]) from None
    lines = Lines({(): 1 if node is None else node.start_mark.line + 1})
    duplicates: list[Problem] = []
    if node is not None:
        _walk(node, (), lines, duplicates, name)
    if duplicates:
        raise unavailable(duplicates)
    return data, lines


def _walk(node: yaml.Node, loc: Loc, lines: Lines, duplicates: list[Problem], name: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str) or key == "<<":
                continue
            line = key_node.start_mark.line + 1
            if key in seen:
                duplicates.append(Problem(name, line, f"duplicate key {key!r} (first on line {seen[key]})"))
            seen.setdefault(key, line)
            lines.at.setdefault((*loc, key), line)
            _walk(value_node, (*loc, key), lines, duplicates, name)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines.at.setdefault((*loc, index), item.start_mark.line + 1)
            _walk(item, (*loc, index), lines, duplicates, name)


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or os.strerror(exc.errno or 0) or type(exc).__name__
    return "not UTF-8 text"
