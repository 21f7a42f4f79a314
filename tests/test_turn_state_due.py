"""When the sweep looks at a turn (``due_at``) apart from how long its runner holds it (``lease_until``).

``due_at`` is what the stores index. It moves when a turn enters or leaves the due set or becomes
due earlier, never because a lease was renewed; so a running turn's ``due_at`` may be behind its
lease end, never past it (the sweep must never look later than the lease ends).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopengine.domain import turn_state as ts
from loopengine.domain.turns import TurnRecord, TurnStatus
from tests.contract import T0, turn

LEASE = 60.0


def _running(due: float | None, lease: float) -> TurnRecord:
    return turn(status=TurnStatus.RUNNING, runner="run_a", lease_until=lease, due_at=due)


def test_a_renewal_extends_the_lease_and_leaves_the_due_time() -> None:
    held = _running(due=T0 + LEASE, lease=T0 + LEASE)

    renewed = ts.renew(held, "run_a", T0 + 2 * LEASE)

    assert renewed is not None
    assert (renewed.lease_until, renewed.due_at) == (T0 + 2 * LEASE, T0 + LEASE)


def test_a_model_answer_extends_the_lease_and_leaves_the_due_time() -> None:
    held = _running(due=T0 + LEASE, lease=T0 + LEASE)

    answered = ts.model_answered(held, "run_a", T0 + 2 * LEASE)

    assert answered is not None
    assert (answered.lease_until, answered.due_at) == (T0 + 2 * LEASE, T0 + LEASE)


def test_a_claim_keeps_a_due_time_still_ahead_within_the_lease() -> None:
    ready = turn(status=TurnStatus.READY, due_at=T0 + 50)

    claimed = ts.claim(ready, "run_b", T0 + 1, T0 + 1 + LEASE)

    assert claimed is not None and (claimed.due_at, claimed.lease_until) == (T0 + 50, T0 + 1 + LEASE)


@pytest.mark.parametrize(
    ("status", "due"),
    [
        (TurnStatus.RETRYING, T0 - 1),  # its retry came: the old due time is past
        (TurnStatus.QUEUED, T0),  # due at once
        (TurnStatus.READY, T0 + 500),  # past the new lease's end: the sweep must look earlier
        (TurnStatus.READY, None),
    ],
)
def test_a_claim_is_due_at_the_lease_end_otherwise(status: TurnStatus, due: float | None) -> None:
    waiting = turn(status=status, due_at=due)

    claimed = ts.claim(waiting, "run_b", T0, T0 + LEASE)

    assert claimed is not None and claimed.due_at == T0 + LEASE


def test_a_dead_runners_turn_taken_over_is_due_at_the_new_lease_end() -> None:
    dead = _running(due=T0 - 10, lease=T0 - 1)

    taken = ts.claim(dead, "run_b", T0, T0 + LEASE)

    assert taken is not None and (taken.runner, taken.due_at) == ("run_b", T0 + LEASE)


def test_the_sweep_moves_a_renewed_turns_due_time_to_its_lease_end_and_nothing_else() -> None:
    renewed = _running(due=T0 - 5, lease=T0 + 40)

    later = ts.look_later(renewed, T0)

    assert later == dataclasses.replace(renewed, due_at=T0 + 40)


@pytest.mark.parametrize(
    "record",
    [
        _running(due=T0 - 5, lease=T0 - 1),  # the lease ran out: the runner is dead, the turn is due
        _running(due=T0 + 40, lease=T0 + 40),  # already at the lease end
        turn(status=TurnStatus.READY, due_at=T0 - 5),
        turn(status=TurnStatus.PAUSED, due_at=T0 - 5),
    ],
)
def test_look_later_leaves_a_turn_that_is_really_due(record: TurnRecord) -> None:
    assert ts.look_later(record, T0) is None


@given(
    due=st.floats(T0 - 100, T0 + 100),
    beats=st.lists(st.floats(0, 100), max_size=6),
    now=st.floats(T0 - 100, T0 + 100),
)
def test_a_running_turn_is_never_due_after_its_lease_ends(due: float, beats: list[float], now: float) -> None:
    record = ts.claim(turn(status=TurnStatus.READY, due_at=due), "run_a", now, now + LEASE)
    assert record is not None
    for beat in beats:
        record = ts.renew(record, "run_a", record.lease_until + beat) or record
        record = ts.model_answered(record, "run_a", record.lease_until + beat / 2) or record
        assert record.due_at is not None and record.due_at <= record.lease_until
