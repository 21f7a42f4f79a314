"""Idempotency keys at the edge (the Stripe convention): a retried request never makes a second turn.

A client that sends ``Idempotency-Key: <key>`` with ``POST /agents/{agent}/messages`` (or ``POST
/turns/{turnId}/cancel``) may send the same request again when its answer was lost. The key is
stored **in the same write as the turn it created** (so there is never a turn without its key, nor a
key without its turn), scoped to the tenant and the agent, for :data:`TTL_SECONDS`:

* the same key with the same request answers the original turn's *current* state (same ``turnId``;
  no second turn, no second user message, no allowed tool run again);
* the same key with a different request is refused (422 ``idempotency_mismatch``);
* two requests racing with one key: the store's create condition lets one write land; the other
  reads the record and answers as a retry.

The request's fingerprint is a hash of what the client sent (message, sessionId, tenant, live), not
of what the server made of it, so a retry that names no sessionId matches its original.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.base.stored import Stored, StoredForm

TTL_SECONDS = 24 * 3600
"""How long a key is remembered (Stripe keeps them 24 h too)."""
KEY_FORM = re.compile(r"[\x20-\x7e]{1,255}")
"""1-255 printable ASCII characters."""


class IdempotencyMismatch(InvalidInput):
    """The key was used before with a different request."""

    code = "idempotency_mismatch"


@dataclass(frozen=True, slots=True)
class IdempotencyRecord(StoredForm):
    """A key that created a turn: ``key`` is the scoped hash, never the client's text."""

    key: str
    request_hash: str
    turn_id: str
    created_at: float
    expires_at: float


IdempotencyRecord.stored = Stored(IdempotencyRecord)


@dataclass(frozen=True, slots=True)
class Claim:
    """A request's key and fingerprint, before its turn exists."""

    key: str
    request_hash: str

    def record(self, turn_id: str, now: float) -> IdempotencyRecord:
        """The record to store with the turn ``turn_id``."""
        return IdempotencyRecord(self.key, self.request_hash, turn_id, now, now + TTL_SECONDS)


def claim(client_key: str, tenant: str, scope: str, request: dict[str, Any]) -> Claim:
    """The claim for ``client_key`` in ``tenant`` and ``scope`` (e.g. ``agent:<name>``) for ``request``.

    InvalidInput when the key is not 1-255 printable characters.
    """
    if not isinstance(client_key, str) or not KEY_FORM.fullmatch(client_key):
        raise InvalidInput("Idempotency-Key must be 1-255 printable ASCII characters")
    scoped = json.dumps([tenant, scope, client_key], separators=(",", ":"))
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return Claim(
        "idk_" + hashlib.sha256(scoped.encode()).hexdigest()[:40],
        "sha256:" + hashlib.sha256(canonical.encode()).hexdigest(),
    )
