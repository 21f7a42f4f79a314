"""A transient store error next to a tool never makes its outcome unknown (issue: 13 of 328 fault cells).

The worker holds the call's result in memory; it retries the outcome write with backoff while it holds
the turn. Only a store that stays down past the retries leaves the call ``unknown`` (as a dead process
would), and even then the call never runs twice.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from loopengine.app.ports import Change
from loopengine.app.request.resolution import Decider
from loopengine.app.worker import batch
from loopengine.domain.base.errors import StoreError
from loopengine.domain.decisions import Approval
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.harness import Calls, Harness, agent
from tests.scenario import assert_protocol, results, scenario, turn

RULES = {"rules": [{"tool": "lookup", "decision": "allow"}], "default_decision": "ask"}
REVIEWER = Decider("ops@example.com")


class Throttled:
    """Fails the write carrying a call's outcome ``times`` times with a StoreError (as DynamoDB
    throttling does), then lets it through. The outcome rides in a transition (``Change.calls``), so
    that is the write throttled; ``fired`` counts the refusals."""

    def __init__(self, h: Harness, times: int) -> None:
        self.left, self.fired = times, 0
        store = h.rt.stores.turns
        real = store.commit

        def commit(change: Change) -> Any:
            if change.calls and self.left > 0:
                self.left -= 1
                self.fired += 1
                raise StoreError(
                    "ProvisionedThroughputExceededException: rate of requests exceeds throughput"
                )
            return real(change)

        store.commit = commit  # type: ignore[method-assign]


def _model() -> ScriptedModel:
    return ScriptedModel.from_list(
        [call(use("lookup", {"x": 1}, id="l1"), use("refund", {"x": 2}, id="r1")), say("done")]
    )


@pytest.mark.parametrize("times", [1, 3])
def test_a_throttled_outcome_write_keeps_the_real_outcome(times: int) -> None:
    calls = Calls()
    cfg = agent("shop", [calls.tool("lookup"), calls.tool("refund")], RULES)
    with scenario(cfg, model=_model()) as h:
        throttle = Throttled(h, times)
        out = h.engine.send_message("shop", "refund please")  # the allowed lookup's write is throttled
        assert out.status is TurnStatus.PAUSED
        throttle.left = times  # and the approved refund's, in the worker
        h.engine.resolve(out.pending[0].pending_id, Approval(), REVIEWER)
        assert throttle.fired == 2 * times  # both outcome writes were refused that often

        done = turn(h, out.turn_id)
        assert (done.status, done.stop_reason) == (TurnStatus.FINISHED, StopReason.END_TURN)
        answered = results(assert_protocol(h, out.session_id)[2])
        assert all("unknown" not in json.dumps(v) for v in answered.values()), answered
        assert calls.count("lookup") == calls.count("refund") == 1
        outcomes = {c.tool: c.outcome for c in h.rt.stores.turns.calls(out.turn_id).values()}
        assert outcomes == {"lookup": "ok", "refund": "ok"}


def test_a_store_down_past_the_retries_leaves_unknown_and_never_reruns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch, "OUTCOME_WRITE_ATTEMPTS", 2)
    calls = Calls()
    cfg = agent("shop", [calls.tool("lookup"), calls.tool("refund")], RULES)
    with scenario(cfg, model=_model()) as h:
        throttle = Throttled(h, 10**6)
        with pytest.raises(StoreError):
            h.engine.send_message("shop", "refund please", session_id="ses_down")
        throttle.left = 0  # the store is back; the runner that held the result is gone
        h.clock.advance(h.rt.lease_seconds + 1)
        h.engine.sweep()

        (only,) = h.rt.stores.turns.session_turns("ses_down")
        out = h.engine.outcome(only.turn_id)
        assert out.status is TurnStatus.PAUSED and [p.tool for p in out.pending] == ["refund"]
        cp = h.rt.stores.checkpoints.find_by_pending(out.pending[0].pending_id)
        assert cp is not None
        [lookup] = [r for r in cp.results_so_far if r.tool_use_id == "l1"]
        assert json.loads(lookup.content)["status"] == "unknown"
        assert calls.count("lookup") == 1  # never run twice
