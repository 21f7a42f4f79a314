"""A fault for DynamoDB clients under moto: the write is applied, then its response is lost.

The hook sits on ``before-send`` *after* moto's stubber (``register_last`` on the same event, so
moto has already applied the request) and raises botocore's ``ReadTimeoutError``: botocore's
``standard`` retry then sends the very same request again, exactly as after a timeout on AWS.
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
        self.index: int | None = None
        self.rate = 0.0
        self.sent: list[str] = []
        self.fired: list[str] = []
        client.meta.events.register_last("before-send", self._after_moto)

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
            raise ReadTimeoutError(endpoint_url=request.url, error="injected: applied, response lost")
