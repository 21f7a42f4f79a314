"""A fault for DynamoDB clients under moto: the write is applied, then its response is lost.

Two of botocore's own event hooks on the client, nothing of moto's or botocore's replaced: one on
``before-send`` *after* moto's (``register_last`` on the same event, so moto has already applied
the request) raises botocore's ``ReadTimeoutError``, and botocore's ``standard`` retry then sends
the very same request again, exactly as after a timeout on AWS. The other, first on
``needs-retry``, answers a delay of zero for the faults it injected: botocore's retry handler still
runs (and counts the attempt), but the re-send goes out at once instead of after a jittered backoff
of up to a second.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

WRITES = frozenset({"PutItem", "TransactWriteItems", "BatchWriteItem", "UpdateItem", "DeleteItem"})


class ResponseLost:
    """Writes whose response is lost after DynamoDB (moto) applied them; botocore re-sends them.

    Write requests are numbered by their first send since :meth:`arm` (re-sends carry
    ``amz-sdk-request: attempt=2..``). ``index`` faults that one; ``rate`` faults a random share.
    """

    def __init__(self, client: Any, seed: int = 7) -> None:
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self._injected: list[BaseException] = []
        self.index: int | None = None
        self.rate = 0.0
        self.sent: list[str] = []
        self.fired: list[str] = []
        client.meta.events.register_last("before-send", self._after_moto)  # moto's node: after it
        client.meta.events.register_first("needs-retry.dynamodb", self._at_once)

    def arm(self, index: int | None = None, rate: float = 0.0) -> None:
        """Start numbering writes from 0; fault write ``index`` and/or a ``rate`` share of them."""
        with self._lock:
            self.index, self.rate, self.sent, self.fired = index, rate, [], []

    def _after_moto(self, request: Any, event_name: str, **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        first_send = request.headers.get("amz-sdk-request", b"").startswith(b"attempt=1;")
        if operation not in WRITES or not first_send:
            return
        with self._lock:
            number = len(self.sent)
            self.sent.append(operation)
            fire = number == self.index or (self.rate > 0 and self._random.random() < self.rate)
            if fire:
                self.fired.append(operation)
        if fire:
            lost = ReadTimeoutError(endpoint_url=request.url, error="injected: applied, response lost")
            with self._lock:
                self._injected.append(lost)
            raise lost

    def _at_once(self, caught_exception: BaseException | None = None, **_: Any) -> float | None:
        """Zero seconds for a fault injected here (None: botocore's own handler decides alone)."""
        with self._lock:
            ours = [e for e in self._injected if e is caught_exception]
            if not ours:
                return None
            self._injected.remove(ours[0])
        return 0.0


KINDS = ("throttled", "lost", "transient", "applied", "ambiguous")
"""What :class:`RequestFault` does to its request (docs/reliability.md, "The store-fault matrix"):

- ``throttled``: every attempt is answered ``ThrottlingException`` and never reaches DynamoDB;
  botocore's ``standard`` retries run out and the store raises (sustained throttling);
- ``lost``: every attempt fails to connect (``EndpointConnectionError``: the request never reaches
  DynamoDB); botocore's retries run out and the store raises (a network partition);
- ``transient``: the first attempt is throttled (never reaches DynamoDB), botocore's retry succeeds;
- ``applied``: the first attempt is applied by DynamoDB (moto) and its response lost
  (``ReadTimeoutError``); botocore sends the same request again (:class:`ResponseLost`, any request);
- ``ambiguous``: every attempt is applied and its response lost; botocore's retries run out and the
  store raises though the write landed (a write DynamoDB applied while the network failed after it).
"""

_NOWHERE = "https://dynamodb.fault.invalid/"
"""Where a throttled attempt is pointed so moto's own ``before-send`` handler does not serve it."""


class RequestFault:
    """DynamoDB request ``k`` since :meth:`arm` (numbered by first send, any operation) meets ``kind``.

    botocore's public hooks only: one first on ``before-send`` numbers the requests and answers or
    fails the faulted attempts before moto's handler sees them (botocore runs every ``before-send``
    handler and takes the first response, so a throttled attempt is also re-addressed to a host
    moto does not serve); one last on ``before-send`` (after moto's) loses an applied attempt's
    response; one first on ``needs-retry`` makes the re-sends of a faulted request go out at once.
    Requests are one at a time (``one_request_at_a_time``), so a re-send belongs to the last first send.
    """

    def __init__(self, client: Any) -> None:
        self._lock = threading.Lock()
        self.kind = "throttled"
        self.index: int | None = None
        self.sent: list[str] = []
        self.attempts = 0
        self.counting = False
        self._current: int | None = None
        self._faulted: int | None = None  # the attempt this hook just failed
        events = client.meta.events
        events.register_first("before-send.dynamodb", self._before_moto)
        events.register_last("before-send", self._after_moto)
        events.register_first("needs-retry.dynamodb", self._at_once)

    def arm(self, index: int | None, kind: str = "throttled") -> None:
        """Number requests from 0 from now; fault request ``index`` (None: only count) with ``kind``."""
        assert kind in KINDS, kind
        with self._lock:
            self.index, self.kind, self.sent, self.attempts, self._current = index, kind, [], 0, None
            self.counting = True

    def disarm(self) -> None:
        """Stop counting and faulting."""
        with self._lock:
            self.index, self._current, self.counting = None, None, False

    @property
    def fired(self) -> bool:
        """The faulted request was sent."""
        return self.attempts > 0

    def _target(self, request: Any, event_name: str) -> int | None:
        """The attempt number if ``request`` is an attempt of the faulted request, else None."""
        attempt = _attempt(request)
        with self._lock:
            if not self.counting:
                return None
            if attempt == 1:
                self._current = len(self.sent)
                self.sent.append(event_name.rsplit(".", 1)[-1])
            if self.index is None or self._current != self.index:
                return None
            self.attempts = max(self.attempts, attempt)
            return attempt

    def _before_moto(self, request: Any, event_name: str, **_: Any) -> AWSResponse | None:
        attempt = self._target(request, event_name)
        if attempt is None or self.kind in _AFTER or (self.kind == "transient" and attempt > 1):
            return None
        self._faulted = attempt
        if self.kind == "lost":
            raise EndpointConnectionError(endpoint_url=request.url)
        request.url = _NOWHERE  # moto's handler passes a host it does not serve: DynamoDB never sees it
        body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException"})
        headers = HTTPHeaders()
        headers["x-amzn-ErrorType"] = "ThrottlingException"
        return AWSResponse(request.url, 400, headers, _Raw(body.encode()))

    def _after_moto(self, request: Any, event_name: str, **_: Any) -> None:
        if self.kind not in _AFTER or not event_name.startswith("before-send.dynamodb"):
            return
        attempt = _attempt(request)
        with self._lock:
            ours = self.index is not None and self._current == self.index
        if ours and (attempt == 1 or self.kind == "ambiguous"):
            self._faulted = attempt
            raise ReadTimeoutError(endpoint_url=request.url, error="injected: applied, response lost")

    def _at_once(self, attempts: int = 0, **_: Any) -> float | None:
        """No backoff after an attempt faulted here (after the last one, botocore's handler says stop).

        botocore takes the first handler's answer, so only an attempt this hook failed gets one: a
        successful re-send is never sent again. (Each cell's client is new: its retry quota is full.)
        """
        with self._lock:
            ours, self._faulted = self._faulted == attempts, None
        return 0.0 if ours and attempts < ATTEMPTS else None


ATTEMPTS = 5
"""The production client's attempts per call (``new_client``'s default)."""
_AFTER = ("applied", "ambiguous")
"""The kinds that let moto apply the attempt, then lose its response."""


def _attempt(request: Any) -> int:
    """Which of botocore's attempts ``request`` is (its ``amz-sdk-request: attempt=N; max=M`` header)."""
    return int(request.headers.get("amz-sdk-request", b"attempt=1;").split(b";")[0].split(b"=")[1])


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body
