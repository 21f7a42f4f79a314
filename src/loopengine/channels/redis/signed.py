"""Signed Redis entries: the webhook's signature (:mod:`loopengine.channels.signing`) on a queue.

Anyone who can write to the key can push an entry, so every entry is signed like a webhook and the
consumer refuses what it cannot verify. The signature is the webhook's own value,
``t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body bytes>")>``, over the webhook's JSON body,
byte for byte, with the secret ``secret_env`` names:

- **list** (``RPUSH``): the entry is the body with one more member at its end,
  ``{"event":...,...,"signature":"t=...,v1=..."}``: the signed bytes are the entry without that
  last member (``,"signature":"..."`` cut, the closing brace kept). Any JSON reader still reads it
  as the webhook's body;
- **stream** (``XADD``): the field ``signature`` beside ``body``, which is the signed bytes as they are.

The consumer verifies before it parses (:func:`opened`), in constant time, and refuses an entry
whose timestamp is more than ``tolerance`` seconds from its clock: by default the week the
consumer remembers handled ``eventId`` values for, so a replayed copy is either recognised as a
duplicate or refused as too old, never decided twice.
"""

from __future__ import annotations

import json
import re

from loopengine.channels.signing import RejectReason, WebhookVerificationError, sign, verify_webhook

FIELD = "signature"
"""The list entry's last member, and the stream entry's field, that carries the signature."""
_TAIL = re.compile(rb',"signature":"(t=[0-9]{1,20},v1=[0-9a-f]{64})"\}\Z')


def sealed(secret: str, body: str, timestamp: int) -> tuple[str, str]:
    """The list entry for ``body`` (a JSON object) and its signature, signed at ``timestamp``."""
    if not (body.startswith("{") and body.endswith("}") and len(body) > 2):
        raise ValueError("a signed entry's body is a non-empty JSON object")
    signature = sign(secret, body.encode("utf-8"), timestamp)
    return body[:-1] + f',"{FIELD}":' + json.dumps(signature) + "}", signature


def opened(
    secret: str,
    raw: bytes,
    signature: bytes | str | None = None,
    *,
    tolerance: int,
    now: float | None = None,
) -> bytes:
    """The signed body of an entry, verified; raises :class:`WebhookVerificationError` otherwise.

    A list entry carries its signature as its last member (``signature`` None); a stream entry's
    ``body`` field comes with its ``signature`` field.
    """
    if signature is None:
        found = _TAIL.search(raw)
        if found is None:
            raise WebhookVerificationError(RejectReason.MISSING_HEADER, "the entry is not signed")
        raw, signature = raw[: found.start()] + b"}", found.group(1)
    if isinstance(signature, bytes):
        signature = signature.decode("ascii", "replace")
    verify_webhook(secret, raw, signature or None, now=now, tolerance=tolerance)
    return raw
