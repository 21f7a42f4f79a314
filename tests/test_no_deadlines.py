"""No test has a wall-clock deadline (issue 28): the suite passes on a loaded machine, every time.

Hypothesis's default deadline (200 ms an example) fails a test whose example waited for a store, a
server or a busy CPU. tests/conftest.py loads a profile without one before any test module is
imported; a test's own ``settings`` may not bring a deadline back.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parent
SETTINGS = re.compile(r"\b(?:settings|register_profile)\(([^)]*)\)")
DEADLINE = re.compile(r"\bdeadline\s*=\s*(?!None\b)[^,)\s]+")


def test_hypothesis_runs_without_a_deadline() -> None:
    assert settings.default is not None and settings.default.deadline is None
    assert settings().deadline is None  # what an @settings(...) without deadline= inherits


def test_no_test_sets_a_hypothesis_deadline() -> None:
    found = [
        f"{path.relative_to(TESTS)}: {call.group(0)}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name not in ("test_moto_speedups.py", "test_no_deadlines.py")  # (the first is going)
        for call in SETTINGS.finditer(path.read_text())
        if DEADLINE.search(call.group(1))
    ]
    assert found == []
    caught = SETTINGS.search("@settings(max_examples=5, deadline=200)")  # what it would catch
    assert caught is not None and DEADLINE.search(caught.group(1))
