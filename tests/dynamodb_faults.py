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

import random
import threading
from typing import Any

from botocore.exceptions import ReadTimeoutError

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
