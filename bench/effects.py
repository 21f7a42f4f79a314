"""How many times each tool's body ran, in this process (the bench's re-executed-effects count).

The bench agent's tools (bench/agents/refund_cycle/tools.py) are loaded by the agent registry by
path; they record here, a module both they and bench/scenario.py import by its one name.
"""

from __future__ import annotations

from collections import Counter

RUNS: Counter[str] = Counter()
"""Tool name -> times its body ran since the last ``RUNS.clear()``."""
