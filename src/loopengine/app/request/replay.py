"""Answering a retried request from its idempotency key (see :mod:`loopengine.domain.idempotency`)."""

from __future__ import annotations

from loopengine.app.outcome import TurnOutcome, outcome
from loopengine.app.runtime import Runtime
from loopengine.domain.idempotency import Claim, IdempotencyMismatch


def replay(rt: Runtime, claim: Claim | None) -> TurnOutcome | None:
    """The current outcome of the turn ``claim``'s key created, if the key is known and unexpired.

    IdempotencyMismatch (422) when the key came with a different request. ``None``: a first request.
    """
    if claim is None:
        return None
    record = rt.stores.turns.get_idempotency(claim.key)
    if record is None or record.expires_at <= rt.stores.clock.now():
        return None
    if record.request_hash != claim.request_hash:
        raise IdempotencyMismatch(
            "this Idempotency-Key was used with a different request; use a new key for a new request"
        )
    return outcome(rt, record.turn_id)
