"""The documented Python API (docs/python.md): its runnable example runs, and says what the page says.

GIVEN a clean environment (no model key, no store settings) and an empty working directory, WHEN
``examples/embed.py`` runs as a program, THEN it builds the engine from settings, sends a message,
follows the turn (the model's text arriving in pieces), lists and approves both pending items, plugs a
store of its own, prints what docs/python.md shows it printing, and leaves nothing behind. The
signatures the page gives are the code's.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopengine import Engine, build_engine

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "embed.py"
PAGE = ROOT / "docs" / "python.md"


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    cwd = tmp_path_factory.mktemp("embed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    return done, cwd


def test_the_example_runs_offline_and_does_what_the_page_says(
    ran: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, cwd = ran
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no warning, no traceback
    out = done.stdout
    assert re.search(r"^sent: turn trn_[0-9a-f]{32} is running$", out, re.M)  # budget 0: answered at once
    assert re.findall(r"^pending: (\w+)", out, re.M) == ["issue_refund", "send_email"]
    assert re.findall(r"^approved (\w+): 0 outstanding$", out, re.M) == ["issue_refund", "send_email"]
    streamed = re.search(r"^  agent: (Done: order A-1001 was refunded .*)  \((\d+) pieces\)$", out, re.M)
    assert streamed is not None and int(streamed.group(2)) > 5, out  # the text arrived in pieces
    assert re.search(rf"^finished: {re.escape(streamed.group(1))}$", out, re.M)  # the same text, whole
    assert re.search(r"^  \[\d+\] finished: end_turn$", out, re.M)
    plugged = re.search(r"^plugged store: turn finished; copied (\d+) events: (.*)$", out, re.M)
    assert plugged is not None and int(plugged.group(1)) > 3
    assert plugged.group(2).split(", ")[0] == "started" and "finished" in plugged.group(2)
    assert list(cwd.iterdir()) == []  # its databases lived in a temporary directory


def test_the_page_shows_what_the_example_prints(ran: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    page = PAGE.read_text()
    block = page.split("```text\n", 1)[1].split("```", 1)[0]
    printed = ran[0].stdout
    at = 0
    for line in block.splitlines():
        pattern = ".*?".join(re.escape(part) for part in line.split("..."))
        found = re.compile(pattern).search(printed, at)
        assert found is not None, f"docs/python.md shows {line!r}; the example printed:\n{printed}"
        at = found.end()


def test_the_signatures_on_the_page_are_the_codes() -> None:
    page = PAGE.read_text()
    functions: list[tuple[str, Callable[..., Any]]] = [
        ("build_engine", build_engine),
        ("send_message", Engine.send_message),
        ("open_items", Engine.open_items),
        ("follow", Engine.follow),
        ("resolve", Engine.resolve),
    ]
    for name, function in functions:
        shown = [m for m in re.findall(rf"`(?:engine\.)?{name}\(([^`]*)\)`", page) if "_" in m or "=" in m]
        assert shown, f"docs/python.md gives no signature for {name}"
        documented = [p.split("=")[0].strip() for p in shown[0].split(",")]
        documented = [d for d in documented if d not in ("*", "") and not d.startswith('"')]
        actual = [p for p in inspect.signature(function).parameters if p not in ("self", "engine")]
        assert [a for a in actual if a in documented] == documented, (name, documented, actual)
    for method in ("answer", "events", "outcome", "turn", "audit", "history", "cancel"):
        assert f"{method}(" in page and callable(getattr(Engine, method))
