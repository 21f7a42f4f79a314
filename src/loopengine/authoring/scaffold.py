"""``loopengine new-agent NAME``: write a working agent folder that runs offline.

The folder holds agent.yaml, rules.yaml, tools.py (a ticket tool, and a charge tool that sends the
call's idempotency key to a payment API), script.py (the offline scripted model),
payments_standin.py (a local stand-in for that API) and a test that runs with or without pytest.
Nothing is ever overwritten: an existing folder is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from loopengine.authoring import scaffold_templates as t
from loopengine.authoring.agent_schema import AGENT_NAME
from loopengine.authoring.scaffold_standin import STANDIN_PY
from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.base.yaml_lines import display


@dataclass(frozen=True, slots=True)
class Scaffolded:
    """What :func:`new_agent` wrote."""

    name: str
    folder: Path
    files: tuple[Path, ...]


def folder_name(name: str) -> str:
    """The folder (and Python package) name of route name ``name``: ``returns-desk`` -> ``returns_desk``."""
    return name.replace("-", "_")


def new_agent(name: str, parent: Path) -> Scaffolded:
    """Write agent ``name`` into ``parent/<folder_name>``; InvalidInput if it exists or is misnamed."""
    if not re.match(AGENT_NAME, name) or not folder_name(name).isidentifier():
        raise InvalidInput(
            f"{name!r} is not an agent name: use letters, digits, '-' and '_' (up to 63), starting "
            "with a letter, e.g. returns-desk"
        )
    module = folder_name(name)
    folder = parent / module
    if folder.exists():
        raise InvalidInput(f"{display(folder)} already exists; nothing was written")
    files = {
        "agent.yaml": t.AGENT_YAML,
        "rules.yaml": t.RULES_YAML,
        "tools.py": t.TOOLS_PY,
        "script.py": t.SCRIPT_PY,
        "payments_standin.py": STANDIN_PY,
        f"test_{module}.py": t.TEST_PY,
    }
    folder.mkdir(parents=True)
    written = []
    for filename, template in files.items():
        path = folder / filename
        with path.open("x", encoding="utf-8") as out:  # "x": never overwrite, even in a race
            out.write(Template(template).substitute(name=name, module=module))
        written.append(path)
    return Scaffolded(name, folder, tuple(written))


def next_steps(
    made: Scaffolded, on_path: bool, python: str = "python", loopengine: str = "loopengine"
) -> str:
    """What to do now, for the person who ran ``new-agent`` (``on_path``: loaded without setup).

    ``python`` / ``loopengine``: how this shell reaches the interpreter and the command that have
    loopengine installed (``.venv/bin/python`` after ``make run``, which installs no pytest: the
    agent's test runs as a plain script).
    """
    where = display(made.folder)
    lines = [f"created {where}/ with {', '.join(p.name for p in made.files)}", "", "next:"]
    if not on_path:
        parent = made.folder.parent.resolve()
        lines.append(f"  export LOOPENGINE_AGENTS_PATH={parent}   # so loopengine finds it")
    steps = [
        (f"{loopengine} agents --check", "validate every agent"),
        (f"{python} {where}/test_{made.folder.name}.py", "its tests, offline (pytest runs them too)"),
        (f"{python} {where}/payments_standin.py &", "a stand-in payment API on :8790 for the charge tool"),
        (f"{loopengine} dev", "serves it on http://127.0.0.1:8787"),
        (f"{loopengine} chat {made.name}", 'try "Charge 12.50 to a@example.com for the broken mug"'),
    ]
    width = max(len(command) for command, _ in steps)
    lines += [f"  {command:<{width}}   # {why}" for command, why in steps]
    lines += [
        f"  curl -s 127.0.0.1:8787/agents/{made.name}/messages -H 'content-type: application/json' \\",
        '       -d \'{"message": "Urgent: the shop is down"}\'',
        f"  edit {where}/rules.yaml (who may approve, what runs unasked); docs/agents.md explains every key",
    ]
    return "\n".join(lines)
