"""Webhook signatures: the one algorithm both the sender and the receiver use.

A signed webhook carries one header, chosen by the body's ``event``:

    approval              X-Actauth-Signature
    question              X-Askuser-Signature
    run_start, run_finish X-Loopengine-Signature

and its value is ``t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body bytes>")>``. The
MAC covers the exact bytes on the wire, so a receiver must verify the raw body *before* parsing it.
A value may carry several ``v1=`` entries (one per secret while a key is being rotated); one match
is enough. Entries with other schemes (``v0=``, ...) are ignored, so new schemes can be added
without breaking old receivers.

:func:`verify_webhook` returns ``None`` when the request is authentic and fresh, and otherwise
raises :class:`WebhookVerificationError`, whose ``reason`` says why (a :class:`RejectReason`).
Raising rather than returning a bool means a caller cannot forget to look at the answer.

Slack's and Lark's requests are signed their own way, but checked the same way here:
:func:`check_headers` (every header present and well formed, the timestamp within the replay
window) and :func:`verify_headers` (then the signature, compared in constant time), with the same
:class:`RejectReason`s.

Standard library only; this is the one module under ``notify`` allowed to read ``time.time``
(for ``now=None``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from types import MappingProxyType

APPROVAL_SIGNATURE_HEADER = "X-Actauth-Signature"
QUESTION_SIGNATURE_HEADER = "X-Askuser-Signature"
LIFECYCLE_SIGNATURE_HEADER = "X-Loopengine-Signature"

SIGNATURE_HEADERS: Mapping[str, str] = MappingProxyType(
    {
        "approval": APPROVAL_SIGNATURE_HEADER,
        "question": QUESTION_SIGNATURE_HEADER,
        "run_start": LIFECYCLE_SIGNATURE_HEADER,
        "run_finish": LIFECYCLE_SIGNATURE_HEADER,
    }
)
"""Event name → the header its signature travels in."""

DEFAULT_TOLERANCE = 300
"""Seconds a signature's timestamp may differ from the receiver's clock, either way."""

SCHEME = "v1"

UNIX_SECONDS = re.compile(r"[0-9]{1,12}")
"""The form of a signed request's timestamp header (Slack's, Lark's)."""
_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_MAX_HEADER_LEN = 4096


class RejectReason(StrEnum):
    """Why a signed request (a webhook, a redis entry, a Slack or Lark request) failed verification."""

    MISSING_HEADER = "missing_header"
    MALFORMED_HEADER = "malformed_header"
    STALE_TIMESTAMP = "stale_timestamp"
    BAD_SIGNATURE = "bad_signature"
    UNSIGNED = "unsigned"
    """Lark: a request with neither a signature nor an encrypted body, where one is required."""
    UNREADABLE = "unreadable"
    """Lark: an encrypted body the configured Encrypt Key cannot read."""
    BAD_TOKEN = "bad_token"
    """Lark: a body whose Verification Token is not the configured one."""


class WebhookVerificationError(ValueError):
    """A signed request's signature headers are missing, malformed, stale or do not match."""

    def __init__(self, reason: RejectReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def signature_header(event: str) -> str:
    """Return the header name that carries the signature for ``event``.

    Raises ``ValueError`` for an event that is not one of ``SIGNATURE_HEADERS``.
    """
    try:
        return SIGNATURE_HEADERS[event]
    except KeyError:
        known = ", ".join(SIGNATURE_HEADERS)
        raise ValueError(f"unknown webhook event {event!r} (expected one of {known})") from None


def _require_secret(secret: str) -> None:
    if not isinstance(secret, str) or not secret:
        raise ValueError(
            "the webhook secret must not be empty: an empty key makes every signature forgeable "
            "(set LOOPENGINE_DEFAULT_WEBHOOK_SECRET or the notifier's secret_env)"
        )


def _mac(secret: str, body: bytes, timestamp: int) -> str:
    _require_secret(secret)
    message = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """Return the signature header value ``t=<timestamp>,v1=<hex HMAC-SHA256>`` for ``body``.

    Raises ``ValueError`` for an empty secret.
    """
    return f"t={timestamp},{SCHEME}={_mac(secret, body, timestamp)}"


def _parse(header_value: str) -> tuple[int, list[str]]:
    """Split a header value into its timestamp and its ``v1`` signatures (lower-case hex)."""
    if len(header_value) > _MAX_HEADER_LEN:
        raise WebhookVerificationError(RejectReason.MALFORMED_HEADER, "signature header too long")
    timestamps: list[str] = []
    signatures: list[str] = []
    for part in header_value.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise WebhookVerificationError(
                RejectReason.MALFORMED_HEADER, "signature header entries must be key=value"
            )
        if key == "t":
            timestamps.append(value)
        elif key == SCHEME:
            if not _HEX_SHA256.fullmatch(value):
                raise WebhookVerificationError(
                    RejectReason.MALFORMED_HEADER, "v1 signature is not 64 hex digits"
                )
            signatures.append(value.lower())
    if len(timestamps) != 1 or not timestamps[0].isascii() or not timestamps[0].isdigit():
        raise WebhookVerificationError(
            RejectReason.MALFORMED_HEADER, "signature header needs exactly one t=<unix seconds>"
        )
    if not signatures:
        raise WebhookVerificationError(RejectReason.MALFORMED_HEADER, "signature header has no v1= signature")
    return int(timestamps[0]), signatures


def verify_webhook(
    secret: str,
    body: bytes,
    header_value: str | None,
    *,
    now: float | None = None,
    tolerance: int = DEFAULT_TOLERANCE,
) -> None:
    """Check that ``body`` was signed with ``secret`` within ``tolerance`` seconds of ``now``.

    ``header_value`` is the raw value of the event's signature header (``None`` when the request
    had none); ``body`` is the raw request body, exactly as received. ``now`` defaults to the
    system clock. Returns ``None`` when the webhook is authentic and fresh; otherwise raises
    :class:`WebhookVerificationError` with a ``reason``. The signature is checked before the
    timestamp, so ``STALE_TIMESTAMP`` is only ever reported for an authentic (replayed) request.
    Comparisons are constant time. An empty ``secret`` raises ``ValueError`` (a configuration
    error, not a rejected request), whatever the request carries.
    """
    _require_secret(secret)
    if tolerance < 0:
        raise ValueError("tolerance must not be negative")
    if not header_value:
        raise WebhookVerificationError(RejectReason.MISSING_HEADER, "no signature header")
    timestamp, signatures = _parse(header_value)
    expected = _mac(secret, body, timestamp)
    # Compare against every entry without short-circuiting, so timing reveals nothing.
    matched = False
    for candidate in signatures:
        matched |= hmac.compare_digest(expected, candidate)
    if not matched:
        raise WebhookVerificationError(RejectReason.BAD_SIGNATURE, "signature does not match the body")
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise WebhookVerificationError(
            RejectReason.STALE_TIMESTAMP,
            f"signature timestamp is more than {tolerance} s away from the receiver's clock",
        )


Header = tuple[str, str | None, re.Pattern[str], str]
"""A signed request's header: its name, its value (None when absent), its form, what it must be."""


def check_headers(
    headers: Sequence[Header],
    now: float,
    tolerance: int,
    error: Callable[[RejectReason, str], WebhookVerificationError],
) -> int:
    """The checks of a signed request (Slack's, Lark's) that need no key; returns the timestamp.

    Every header present (``MISSING_HEADER`` for the first that is not), each of its form
    (``MALFORMED_HEADER``: "<name> <what it must be>"), and the first, the timestamp in unix seconds,
    within ``tolerance`` seconds of ``now`` either way (``STALE_TIMESTAMP``); ``error`` makes the
    exception raised.
    """
    if tolerance < 0:
        raise ValueError("tolerance must not be negative")
    for name, value, _form, _must in headers:
        if not value:
            raise error(RejectReason.MISSING_HEADER, f"no {name} header")
    for name, value, form, must in headers:
        if not form.fullmatch(value or ""):
            raise error(RejectReason.MALFORMED_HEADER, f"{name} {must}")
    sent = int(headers[0][1] or "")
    if abs(now - sent) > tolerance:
        raise error(
            RejectReason.STALE_TIMESTAMP,
            f"request timestamp is more than {tolerance} s away from the receiver's clock",
        )
    return sent


def verify_headers(
    headers: Sequence[Header],
    now: float,
    tolerance: int,
    error: Callable[[RejectReason, str], WebhookVerificationError],
    expected: Callable[[], str],
) -> None:
    """:func:`check_headers`, then the signature (the last header) against ``expected()``.

    The comparison is constant time and ignores case; a mismatch is ``BAD_SIGNATURE``.
    """
    check_headers(headers, now, tolerance, error)
    signature = (headers[-1][1] or "").lower()
    if not hmac.compare_digest(expected().encode("ascii"), signature.encode("ascii")):
        raise error(RejectReason.BAD_SIGNATURE, "signature does not match the body")
