"""Import an agent's Python files (``tools.py``, ``script.py``) and report what is wrong with them.

Agents in the ``agents`` package import as ``agents.<folder>.tools``. Agents from
``LOOPENGINE_AGENTS_PATH`` import by file path under a synthetic package with a unique name per
folder (``loopengine_agent_<folder>_<hash>``), so two folders may both have a ``tools.py`` and a
tools.py may still import its siblings relatively (``from .orders import ...``).

A module is imported once per process: Python code is not reloaded (a changed tools.py needs a
restart), but a tools.py that failed to import is tried again once its file changes.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType

from loopengine.authoring.tools import ASK_USER, Tool
from loopengine.domain.base.yaml_lines import Problem, display

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def package_for(folder: Path, package: str | None) -> str:
    """The module name ``folder``'s files import under (creating its synthetic package if needed)."""
    if package is not None:
        return f"{package}.{folder.name}"
    digest = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:12]
    name = f"loopengine_agent_{re.sub(r'[^0-9a-zA-Z_]', '_', folder.name)}_{digest}"
    if name not in sys.modules:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(folder)]
        module = importlib.util.module_from_spec(spec)
        module.__file__ = str(folder / "__init__.py")
        sys.modules[name] = module
    return name


def import_module(folder: Path, package: str | None, stem: str) -> ModuleType:
    """Import ``<folder>/<stem>.py``; ``ImportError``/anything it raises propagates."""
    return importlib.import_module(f"{package_for(folder, package)}.{stem}")


def load_tools(folder: Path, package: str | None) -> tuple[list[Tool], list[Problem]]:
    """``TOOLS`` of the folder's tools.py, or the problems that stop it from loading."""
    path = folder / "tools.py"
    file = display(path)
    if not path.is_file():
        return [], [Problem(file, 1, "missing: every agent needs a tools.py that defines TOOLS")]
    try:
        module = import_module(folder, package, "tools")
    except (Exception, SystemExit) as exc:  # an error in user code must not take other agents down
        return [], [import_problem(path, exc)]
    tools = getattr(module, "TOOLS", None)
    if not isinstance(tools, list | tuple):
        return [], [Problem(file, 1, "defines no TOOLS list (TOOLS = [tool_from_model(...), ...])")]
    problems = []
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        if not isinstance(tool, Tool):
            problems.append(Problem(file, 1, f"TOOLS[{index}] is a {type(tool).__name__}, not a Tool"))
        elif not TOOL_NAME.match(tool.name) or tool.name == ASK_USER:
            why = "is built in" if tool.name == ASK_USER else "must match ^[a-zA-Z0-9_-]{1,64}$"
            problems.append(Problem(file, 1, f"TOOLS[{index}]: tool name {tool.name!r} {why}"))
        elif tool.name in seen:
            problems.append(Problem(file, 1, f"TOOLS[{index}]: tool name {tool.name!r} is defined twice"))
        seen.add(getattr(tool, "name", ""))
    return (list(tools), []) if not problems else ([], problems)


def import_problem(path: Path, exc: BaseException) -> Problem:
    """Where in ``path`` (or a module it imports) an import failed, as ``file:line: error``."""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = Path(exc.filename)
        return Problem(display(where), exc.lineno or 1, f"{type(exc).__name__}: {exc.msg}")
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if Path(f.filename).parent == path.parent]
    where = Path(ours[-1].filename) if ours else path
    line = (ours[-1].lineno or 1) if ours else 1
    return Problem(display(where), line, f"cannot import: {type(exc).__name__}: {exc}")
