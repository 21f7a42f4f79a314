"""Agent folders written into a temporary directory, for the loading, isolation and pinning tests.

``write_agent(root, "shop")`` writes a valid agent ``shop`` (folder ``shop/``) with one tool,
``refund``, whose calls are appended to ``<folder>/calls.log`` (so calls made in other processes
count too), and a script that calls ``refund(x=1)``, then ``refund(x=2)``, then says ``all done``.
Any file can be replaced by passing its text.
"""

from __future__ import annotations

from pathlib import Path

AGENT_YAML = """\
name: {name}
model: test-model
system: You refund things.
tools: [refund]
"""

RULES_YAML = """\
rules:
  - tool: refund
    decision: ask
default_decision: ask
"""

TOOLS_PY = """\
from pathlib import Path

from loopengine.authoring.tools import Tool

LOG = Path(__file__).parent / "calls.log"
SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def _refund(args):
    with LOG.open("a") as out:
        out.write(f"{args['x']}\\n")
    return {"refunded": args["x"]}


TOOLS = [Tool("refund", "Refund something.", SCHEMA, _refund)]
"""

BLOCKING_TOOLS_PY = """\
import time
from pathlib import Path

from loopengine.authoring.tools import Tool

HERE = Path(__file__).parent
SCHEMA = {{"type": "object", "properties": {{"x": {{"type": "integer"}}}}, "required": ["x"]}}


def _run(args):
    with (HERE / "started.log").open("a") as out:  # the side effect, first
        out.write(f"{{args['x']}}\\n")
    give_up = time.monotonic() + 60  # an API that answers once the test says so (or the process dies)
    while not (HERE / "release").exists() and time.monotonic() < give_up:
        time.sleep(0.02)
    with (HERE / "finished.log").open("a") as out:
        out.write(f"{{args['x']}}\\n")
    return {{"{result}": args["x"]}}


TOOLS = [Tool("{tool}", "{description}", SCHEMA, _run)]
"""
"""A tools.py whose one tool writes ``x`` to ``started.log``, waits for a ``release`` file in the folder,
then writes ``finished.log`` and returns ``{result: x}`` (``.format(tool=, description=, result=)``)."""

SCRIPT_PY = """\
from loopengine.models.scripted import call, say, use


def respond(request):
    msgs = request.messages
    start = max(i for i, m in enumerate(msgs) if m.role == "user" and m.text)
    done = sum(len(m.tool_results) for m in msgs[start + 1 :])
    if done == 0:
        return call(use("refund", {"x": 1}))
    if done == 1:
        return call(use("refund", {"x": 2}))
    return say("all done")
"""


def write_agent(
    root: Path,
    name: str,
    *,
    folder: str | None = None,
    agent: str | None = None,
    rules: str | None = RULES_YAML,
    tools: str | None = TOOLS_PY,
    script: str | None = SCRIPT_PY,
) -> Path:
    """Write one agent folder under ``root``; ``None`` leaves that file out. Returns the folder."""
    path = root / (folder or name.replace("-", "_"))
    path.mkdir(parents=True, exist_ok=True)
    files = {
        "agent.yaml": AGENT_YAML.format(name=name) if agent is None else agent,
        "rules.yaml": rules,
        "tools.py": tools,
        "script.py": script,
    }
    for filename, text in files.items():
        if text is not None:
            (path / filename).write_text(text)
    return path


def calls(folder: Path) -> list[int]:
    """The ``x`` of every refund the folder's tool ran, in order, in any process."""
    log = folder / "calls.log"
    return [int(line) for line in log.read_text().split()] if log.exists() else []
