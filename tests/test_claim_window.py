"""A call is ``unknown`` only when its body may have started (issue 28, item 1).

The approved refund's claim rides in the resume's claim of the turn. A store read that fails
between that write and the refund's body (DynamoDB throttling past botocore's retries, the fault
botocore itself raises under moto) used to leave the refund claimed and never started, and every
later worker reported it ``unknown`` ("I could not finish: refund was unknown", no refund made).
Now the claim is the last store operation before the body: whatever read fails after it, the
refund runs exactly once and the turn finishes ``end_turn`` once the sweep hands it on.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders

from loopengine.app.engine import Engine
from loopengine.app.request.resolution import Decider
from loopengine.app.runtime import Runtime
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import StoreError
from loopengine.domain.decisions import Approval
from loopengine.domain.messages import check_protocol
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from loopengine.stores.dynamodb import create_table, open_dynamodb_stores
from loopengine.stores.dynamodb_table import new_client
from tests.contract.conftest import moto_dynamodb, one_request_at_a_time
from tests.harness import Calls, RecordingNotifier, StaticAgents, agent, reports_unknown

TABLE = "loopengine-claim-window"
WHO = Decider("ops@example.com")
RULES = {"rules": [{"tool": "lookup", "decision": "allow"}], "default_decision": "ask"}
SCRIPT = [call(use("lookup", {"x": 1}, id="l1")), call(use("refund", {"x": 2}, id="r1")), say("Refunded.")]
READS = frozenset({"GetItem", "Query", "BatchGetItem", "Scan"})
ATTEMPTS = 5
"""The production client's attempts per call (``new_client``'s default)."""
WRITES = frozenset({"PutItem", "TransactWriteItems", "BatchWriteItem", "UpdateItem", "DeleteItem"})


class ThrottledRead:
    """Read ``nth`` since :meth:`arm` (counting only reads after its first write with ``after_write``)
    is throttled on every attempt.

    A ``before-send`` handler first in line answers ``ThrottlingException`` (moto never sees the
    request) on each of botocore's attempts, so botocore's ``standard`` retries run out and the
    store raises, as DynamoDB does under sustained throttling; a ``needs-retry`` handler makes the
    re-sends go out at once. ``runs_at_fault``: the tool runs counted when the fault fired.
    """

    def __init__(self, client: Any, calls: Calls) -> None:
        self._lock = threading.Lock()
        self._calls = calls
        self.armed = False
        self.wrote = False
        self.target: str | None = None  # the operation being throttled, until its attempts run out
        self.fired = 0
        self.runs_at_fault: dict[str, int] | None = None
        events = client.meta.events
        events.register_first("before-send.dynamodb", self._before_send)
        events.register_first("needs-retry.dynamodb", self._at_once)

    def arm(self, nth: int, after_write: bool) -> None:
        with self._lock:
            self.armed, self.wrote, self.target, self.fired, self.runs_at_fault = True, False, None, 0, None
            self.left, self.after_write = nth, after_write

    def _before_send(self, request: Any, event_name: str, **_: Any) -> AWSResponse | None:
        operation = event_name.rsplit(".", 1)[-1]
        first_send = request.headers.get("amz-sdk-request", b"").startswith(b"attempt=1;")
        with self._lock:
            if not self.armed:
                return None
            if self.target is not None and (first_send or operation != self.target):
                self.armed = False  # its attempts ran out: the fault is over
                return None
            if self.target is None:
                if operation in WRITES:
                    self.wrote = True
                    return None
                if operation not in READS or (self.after_write and not self.wrote):
                    return None
                self.left -= 1
                if self.left > 0:
                    return None
                self.target = operation
                self.runs_at_fault = {n: self._calls.count(n) for n in ("lookup", "refund")}
            self.fired += 1
        body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException"})
        headers = HTTPHeaders()
        headers["x-amzn-ErrorType"] = "ThrottlingException"
        return AWSResponse(request.url, 400, headers, _Raw(body.encode()))

    def _at_once(self, **_: Any) -> float | None:
        """No backoff before a re-send of ours; past the client's attempts botocore's handler says stop."""
        with self._lock:
            ours = self.target is not None and self.armed and self.fired < ATTEMPTS
            return 0.0 if ours else None


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


class Queued:
    """Lambda's async invoke, delivered when the test says (a failed delivery is left to the sweep)."""

    def __init__(self) -> None:
        self.queue: list[str] = []

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        self.queue.append(turn_id)


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with moto_dynamodb(TABLE):
        yield one_request_at_a_time(new_client())


CELLS = [(1, True), (1, False), (2, False), (3, False)]


@pytest.mark.parametrize(
    ("nth", "after_write"), CELLS, ids=[f"read{n}-{'after' if a else 'of'}-the-claim" for n, a in CELLS]
)
def test_a_read_throttled_around_the_refunds_claim_leaves_it_to_run_once(
    client: Any, nth: int, after_write: bool
) -> None:
    """The resume worker's ``nth`` read (after its claim, or counted from its start) is throttled
    past botocore's retries; the sweep recovers the turn. Nothing is ``unknown``, the refund runs once."""
    calls, clock = Calls(), FakeClock()
    throttle = ThrottledRead(client, calls)
    create_table(client, f"{TABLE}-1")
    invoker, model = Queued(), ScriptedModel.from_list(SCRIPT)
    rt = Runtime(
        stores=open_dynamodb_stores(f"{TABLE}-1", clock, client=client),
        agents=StaticAgents(agent("shop", [calls.tool("lookup"), calls.tool("refund")], RULES)),
        model_for=lambda _c: model,
        notifier_for=lambda _c: RecordingNotifier(),
        invoker=invoker,
        public_url="http://test.invalid",
    )
    engine = Engine(rt)
    out = engine.send_message("shop", "Please refund order 1.", session_id="ses_window")
    (item,) = engine.outcome(out.turn_id).pending
    engine.resolve(item.pending_id, Approval(), WHO)
    assert invoker.queue == [out.turn_id]

    throttle.arm(nth, after_write)  # the resume worker: its first write claims the turn and the refund
    for turn_id in invoker.queue:
        with contextlib.suppress(StoreError):  # the invocation failed; recovery is the sweep's
            engine.resume(turn_id)
    throttle.armed = False  # the fault is over (if it ever fired): recovery runs on a healthy store
    if after_write:  # the claim is the last store operation before the refund's body
        assert throttle.runs_at_fault in (None, {"lookup": 1, "refund": 1}), "a read between claim and run"
    else:
        assert throttle.fired == ATTEMPTS, "botocore retried the throttled read until its attempts ran out"
    for _ in range(3):  # the sweep, with the clock past the dead runner's lease
        if engine.outcome(out.turn_id).status is TurnStatus.FINISHED:
            break
        clock.advance(Runtime.lease_seconds + 1)
        engine.sweep()
        for turn_id in invoker.queue[1:]:
            engine.resume(turn_id)
        del invoker.queue[1:]

    turn = rt.stores.turns.get_turn(out.turn_id)
    assert turn is not None and (turn.status, turn.stop_reason) == (TurnStatus.FINISHED, StopReason.END_TURN)
    history = rt.stores.sessions.load("ses_window")
    check_protocol(history)
    unknown = [r.tool_use_id for m in history for r in m.tool_results if reports_unknown(r.content)]
    assert unknown == [], "a call reported unknown though nothing could have started it"
    assert calls.count("refund") == 1 and calls.count("lookup") == 1
