"""Long-polls are bounded per principal, so nobody's waits can starve the workers.

A request that waits (``GET /turns/{id}/events?wait=S``, ``POST .../resolve?wait=S``) first takes one of
its principal's :attr:`~loopengine.app.runtime.Runtime.max_waits` slots in the store (so the limit holds
across every Lambda environment, not one process); beyond that it is refused at once (429 with
``Retry-After``), and the slot is given back when the wait ends. A slot also expires on its own a few
seconds after its wait's end, so a request killed mid-wait never holds one for long. A request that
does not wait takes no slot and costs no store write.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from loopengine.app.outcome import TurnOutcome, outcome
from loopengine.app.runtime import Runtime
from loopengine.domain.base.errors import LoopengineError
from loopengine.domain.principals import Principal
from loopengine.domain.turns import TurnStatus

SLOT_GRACE_SECONDS = 5.0
"""How long past its wait's end a slot stays held if the request died without giving it back."""
WORKING = (TurnStatus.RUNNING, TurnStatus.READY, TurnStatus.RETRYING)


class TooManyWaits(LoopengineError):
    """The principal already holds all its long-poll slots (429; ``retry_after`` seconds)."""

    code = "too_many_waits"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@contextmanager
def slot(rt: Runtime, who: Principal | None, seconds: float) -> Iterator[None]:
    """Hold one of ``who``'s long-poll slots while the block waits (nothing for a wait of 0)."""
    if seconds <= 0 or who is None:
        yield
        return
    holder = "w_" + hashlib.sha256(who.id.encode()).hexdigest()[:32]
    now = rt.stores.clock.now()
    held = rt.stores.turns.hold_wait(holder, rt.max_waits, now, now + seconds + SLOT_GRACE_SECONDS)
    if held is None:
        raise TooManyWaits(
            f"{who.id} already holds {rt.max_waits} long-polls; retry when one ends",
            retry_after=max(1, math.ceil(seconds)),
        )
    try:
        yield
    finally:
        rt.stores.turns.release_wait(holder, held)


def outcome_within(rt: Runtime, turn_id: str, seconds: float) -> TurnOutcome:
    """Wait up to ``seconds`` (real time) while the turn is working; return its outcome.

    Working means running, ready to resume or waiting to retry the model: the outcome a client
    waits for is a pause (chained) or the finish.
    """
    pause = threading.Event()
    step, waited = 0.02, 0.0
    while True:
        out = outcome(rt, turn_id)
        if out.status not in WORKING or waited >= seconds:
            return out
        pause.wait(step)
        waited += step
        step = min(step * 2, 0.25)
