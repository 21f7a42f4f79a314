"""tests/conftest.py freezes what collection made, so full collections do not walk it again."""

from __future__ import annotations

import gc


def test_the_collected_suite_is_frozen() -> None:
    # pytest, the conftests and every collected module were loaded before the freeze (a fresh
    # interpreter holds none: 0); collections since leave them alone
    assert gc.get_freeze_count() > 10_000
