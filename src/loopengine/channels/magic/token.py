"""Magic links: a signed, expiring token that lets one person decide one pending item from an email.

A token is ``base64url(payload) + "." + base64url(HMAC-SHA256(secret, payload))`` (no padding), where
``payload`` is the compact JSON ``{"p": pendingId, "r": recipient, "e": expiry}`` with ``e`` in whole
Unix seconds. It is URL-safe as it is, so it goes straight into ``/magic/{token}``.

A token is bearer authority for exactly one pending item: whoever holds the link may look at it and
decide it, and the decision is recorded with ``decidedBy`` = the recipient it was issued to (channel
``magic-link``). Nothing else is authorised by it. Expiry bounds how long a forwarded or leaked link
is good for; once the item is decided (through any channel) the link only reports what happened.

:func:`verify_token` checks the signature (constant time) before it parses or trusts anything in
the payload, and raises :class:`InvalidMagicLink` with a :class:`MagicLinkReason` when the token is
malformed, forged, or expired. The secret comes from ``LOOPENGINE_MAGIC_LINK_SECRET``, read by the
composition root or handler, never here, and never logged.

Standard library only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
from dataclasses import dataclass
from enum import StrEnum

from loopengine.domain.base.errors import InvalidInput

SECRET_ENV = "LOOPENGINE_MAGIC_LINK_SECRET"
CHANNEL = "magic-link"
MAX_TOKEN_CHARS = 2048
"""Longer tokens are rejected before any decoding (a link is not a place for kilobytes)."""


class MagicLinkReason(StrEnum):
    """Why a magic-link token was rejected."""

    MALFORMED = "malformed"
    BAD_SIGNATURE = "bad_signature"
    EXPIRED = "expired"


class InvalidMagicLink(InvalidInput):
    """A magic-link token is malformed, does not carry a valid signature, or has expired."""

    code = "invalid_magic_link"

    def __init__(self, reason: MagicLinkReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class MagicClaims:
    """What a verified token says: which item, issued to whom, good until when."""

    pending_id: str
    recipient: str
    expires_at: float


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    """Decode unpadded base64url strictly: only the canonical encoding of some bytes is accepted."""
    if not text or not text.isascii():
        raise ValueError("empty or non-ASCII")
    padded = text + "=" * (-len(text) % 4)
    data = base64.b64decode(padded.encode("ascii"), altchars=b"-_", validate=True)
    if _b64encode(data) != text:  # non-canonical trailing bits, or '+' and '/' smuggled in
        raise ValueError("not canonical base64url")
    return data


def _mac(secret: str, payload: bytes) -> bytes:
    return hmac.new(secret.encode("utf-8"), payload, hashlib.sha256).digest()


def issue_token(secret: str, pending_id: str, recipient: str, expires_at: float) -> str:
    """A token that lets ``recipient`` decide ``pending_id`` until ``expires_at`` (Unix seconds).

    ``expires_at`` is truncated to whole seconds. Raises ``ValueError`` for an empty secret,
    pending id or recipient, or a non-finite expiry.
    """
    if not secret:
        raise ValueError("a magic-link secret is required")
    if not pending_id or not recipient:
        raise ValueError("pending_id and recipient must be non-empty")
    if not math.isfinite(expires_at):
        raise ValueError("expires_at must be a finite number of seconds")
    claims = {"p": pending_id, "r": recipient, "e": int(expires_at)}
    payload = json.dumps(claims, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return f"{_b64encode(payload)}.{_b64encode(_mac(secret, payload))}"


def verify_token(secret: str, token: str, now: float) -> MagicClaims:
    """The claims of ``token`` if ``secret`` signed it and it has not expired at ``now``.

    Raises :class:`InvalidMagicLink`: ``MALFORMED`` (not two base64url parts, or a payload that
    is not the expected JSON), ``BAD_SIGNATURE`` (another secret, or a changed payload),
    ``EXPIRED`` (only ever reported for an authentic token).
    """
    if not secret:
        raise ValueError("a magic-link secret is required")
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
        raise InvalidMagicLink(MagicLinkReason.MALFORMED, "this link is incomplete or malformed")
    encoded_payload, encoded_mac = token.split(".")
    try:
        payload = _b64decode(encoded_payload)
        given = _b64decode(encoded_mac)
    except (ValueError, binascii.Error):
        raise InvalidMagicLink(MagicLinkReason.MALFORMED, "this link is incomplete or malformed") from None
    if not hmac.compare_digest(_mac(secret, payload), given):
        raise InvalidMagicLink(MagicLinkReason.BAD_SIGNATURE, "this link's signature is not valid")
    claims = _claims(payload)
    if now >= claims.expires_at:
        raise InvalidMagicLink(MagicLinkReason.EXPIRED, "this link has expired")
    return claims


def _claims(payload: bytes) -> MagicClaims:
    """Parse an authentic payload (signed by us, so a failure here means a bug or an old format)."""
    bad = InvalidMagicLink(MagicLinkReason.MALFORMED, "this link's contents are not understood")
    try:
        data = json.loads(payload)
    except ValueError:
        raise bad from None
    if not isinstance(data, dict):
        raise bad
    pending_id, recipient, expiry = data.get("p"), data.get("r"), data.get("e")
    if not isinstance(pending_id, str) or not pending_id or not isinstance(recipient, str) or not recipient:
        raise bad
    if not isinstance(expiry, int) or isinstance(expiry, bool):
        raise bad
    return MagicClaims(pending_id=pending_id, recipient=recipient, expires_at=float(expiry))


def magic_url(public_url: str, token: str) -> str:
    """The link to put in an email: ``<public_url>/magic/<token>``."""
    return f"{public_url.rstrip('/')}/magic/{token}"
