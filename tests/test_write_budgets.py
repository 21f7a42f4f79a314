"""Request and unit budgets of the write path on DynamoDB (moto), per phase of the common scenario.

The scenario is the customer-service flow a deployment runs most: a message runs the allowed
``lookup_order`` and parks on the gated ``issue_refund``; approving it resumes the turn, which parks
again on ``send_email``; approving that resumes it to the end. Each phase is metered on its own
(:class:`bench.dynamodb_requests.Meter`: requests by operation, items read, read and write units).

The budgets are ceilings measured on the code as it is (counts, never times); lowering a figure
means lowering its ceiling here. "Flat per step": a session's earlier finished turns must not make
a step read more (within one Query page of items).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from bench.dynamodb_requests import metered_engine, run_flow

from loopengine.domain.base.ids import new_id
from tests.script_support import load_script

PAGE = 25
"""Items that may differ between two runs of one step and still count as flat (a small Query page)."""


@pytest.fixture(scope="module")
def fresh() -> dict[str, Any]:
    with metered_engine() as (engine, meter, invoker):
        return run_flow(engine, meter, invoker, None)


BUDGETS = {  # requests, items read: issue 13's targets (message -> pause <= 6, resolve <= 3, a resume <= 6)
    "message -> pause": (6, 0),  # a new session: nothing to read
    "resolve (refund)": (3, 3),  # the pointer, then the checkpoint and its turn together
    "resume -> pause": (6, 6),
    "resolve (email)": (3, 3),
    "resume -> finish": (6, 8),
}


@pytest.mark.parametrize("phase", list(BUDGETS))
def test_each_phase_stays_within_its_request_budget(fresh: dict[str, Any], phase: str) -> None:
    requests, items = BUDGETS[phase]
    got = fresh[phase]
    assert got["requests"] <= requests and got["items_read"] <= items, got


def test_the_customer_service_walkthrough_stays_within_24_requests(fresh: dict[str, Any]) -> None:
    """Issue 13: the whole walkthrough (message, two approvals, each resume) in at most 24 requests."""
    assert sum(fresh[phase]["requests"] for phase in BUDGETS) <= 24, {
        p: fresh[p]["requests"] for p in BUDGETS
    }


def test_no_phase_writes_a_config_snapshot_twice(fresh: dict[str, Any]) -> None:
    """The snapshot stored by the first turn is not put again (a conditional put that always fails)."""
    assert any(k.startswith("CONFIG#") for k in fresh["message -> pause"]["partition_wru"])
    with metered_engine() as (engine, meter, invoker):
        run_flow(engine, meter, invoker, None)
        again = run_flow(engine, meter, invoker, None)
    for phase, got in again.items():
        if phase != "session":
            assert not any(k.startswith("CONFIG#") for k in got["partition_wru"]), phase


def _with_earlier(count: int) -> dict[str, Any]:
    """The scenario run again in a session that already has ``count`` + 1 finished turns."""
    with metered_engine() as (engine, meter, invoker):
        first = run_flow(engine, meter, invoker, None)
        turns = engine.rt.stores.turns
        (done,) = turns.session_turns(first["session"])
        for index in range(count):
            copy = dataclasses.replace(
                done, turn_id=new_id("trn_"), created_at=done.created_at - 1 - index, version=0
            )
            turns.create_turn(copy)
        return run_flow(engine, meter, invoker, first["session"])


@pytest.fixture(scope="module")
def earlier() -> tuple[dict[str, Any], dict[str, Any]]:
    """The flow's phases in a session with no earlier turn, and in one with 50 (measured once)."""
    return _with_earlier(0), _with_earlier(50)


@pytest.mark.parametrize("phase", ["message -> pause", "resume -> finish"])
def test_a_step_reads_the_same_with_50_earlier_turns(
    phase: str, earlier: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    none, many = earlier
    assert abs(many[phase]["items_read"] - none[phase]["items_read"]) <= PAGE, (none[phase], many[phase])


def _partition_rate() -> Any:
    return load_script("partition_rate")


def test_partition_rate_adds_up_shared_partitions_across_cycles() -> None:
    rate = _partition_rate()
    trace = {
        "a": {"partition_wru": {"gsi1:DUE#1": 4, "TURN#trn_1": 10, "CONFIG#h": 1}},
        "b": {"partition_wru": {"gsi1:DUE#5": 4, "TURN#trn_1": 5}},
        "session": "ses_1",
    }
    rows = {row.key: row.wru_per_second for row in rate.load(trace, 1000, shards=8)}
    assert rows == {"gsi1:DUE#<n>": 1000.0, "TURN#trn_1": 15, "CONFIG#h": 1000.0}
    one_shard = {row.key: row.wru_per_second for row in rate.load(trace, 1000, shards=1)}
    assert one_shard["gsi1:DUE#<n>"] == 8000.0


@pytest.fixture(scope="module")
def steady() -> dict[str, Any]:
    """A cycle in steady state: the second one (the first stores the agent's config snapshot)."""
    return _partition_rate().metered_trace()  # type: ignore[no-any-return]


def test_the_busiest_partition_of_a_metered_cycle(steady: dict[str, Any]) -> None:
    """At 1,000 cycles a second, no partition takes half of the 1,000 WRU/s one partition takes.

    Every index key is one of its family's shards (``DUE#<n>``, ``OUTBOX#<n>``, ``OPEN#<tenant>#<n>``):
    no single key takes every tenant's due work.
    """
    rate = _partition_rate()
    (busiest, *_) = rate.load(steady, 1000)  # LOOPENGINE_INDEX_SHARDS's default
    assert busiest.wru_per_second < rate.PARTITION_WRU / 2, busiest
    keys = {key for phase in steady.values() if isinstance(phase, dict) for key in phase["index_wru"]}
    assert keys and all(re.fullmatch(r"gsi2:(DUE|OUTBOX|OPEN#[^#]*)#\d+", key) for key in keys), keys
