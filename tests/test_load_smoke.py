"""The load run of ``bench/load.py``, small: 20 sessions, 8 clients, one kill -9 of the dev server.

Every turn must come to rest with nothing run twice and every history well formed (see the bench
for the full-size figures). Tools take 50 ms so the kill tends to land mid-call.
"""

from __future__ import annotations

import pytest
from bench.load import run


@pytest.mark.slow
def test_load_with_a_kill_ends_with_every_turn_at_rest() -> None:
    # fast lease/grace here (time to rest with production's is the fault matrix's to assert): this run
    # checks at-most-once per call id, a re-sent message making no 2nd turn, and no turn replaced
    report = run(sessions=20, clients=8, kills=1, tool_delay=0.05, session_timeout=30.0, fast=True)
    print(report.table())
    assert report.kills == 1
    assert report.turns == 20 and report.finished == 20, report.table()
    assert report.replaced == 0 and report.duplicated_turns == 0, report.table()
    assert report.stuck == 0 and report.double_runs == 0 and report.protocol_violations == 0, report.table()
    runs, claims = report.executions["issue_refund"]
    assert runs <= claims  # a call killed mid-run counts as run; nothing runs without its claim
