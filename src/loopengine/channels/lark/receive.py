"""Lark's card callback: checking a request to ``POST /integrations/lark/interactions`` and reading it.

Lark (Feishu) calls an app's *callback* request URL for two things handled here:

* the **URL verification** when the URL is saved in the developer console:
  ``{"challenge": "...", "token": "<Verification Token>", "type": "url_verification"}``, to be
  answered with ``{"challenge": "..."}`` (:class:`LarkChallenge`);
* the **card action** (``card.action.trigger``, callback schema 2.0) when someone clicks a
  callback button of a card the app sent (:mod:`loopengine.channels.lark.cards`)::

      {"schema": "2.0",
       "header": {"event_id", "token": "<Verification Token>", "create_time", "event_type":
                  "card.action.trigger", "tenant_key", "app_id"},
       "event": {"operator": {"open_id", "user_id"?, "union_id"?, "tenant_key"?},
                 "token": "<card update token>",
                 "action": {"tag": "button", "value": {...the button's value...}},
                 "host": "im_message",
                 "context": {"open_message_id", "open_chat_id"}}}

  read into a :class:`LarkAction`: which item, what was decided (approve, deny, or an option's
  text as the answer), by whom (``open_id``), for which app (``header.app_id``).

**Authenticity**, as Lark documents it for callbacks (the app's "Encrypt Key" and "Verification
Token", under Events & Callbacks > Encryption strategy):

* the **Verification Token** travels in every body (``header.token``; ``token`` in a URL
  verification) and must equal the configured one: always checked, in constant time;
* with an **Encrypt Key** configured, Lark signs each request: ``X-Lark-Signature`` = hex
  ``SHA-256(X-Lark-Request-Timestamp + X-Lark-Request-Nonce + encrypt_key + raw body)``. The
  signature is checked first (constant time), on the raw bytes, after the timestamp (±300 s: a
  replay is refused before any hashing). A card action must be signed when a key is configured.
  The body is then ``{"encrypt": "<base64>"}``: AES-256-CBC with key ``SHA-256(encrypt_key)``, the
  first 16 bytes of the decoded data the IV, PKCS#7 padding, the plaintext the JSON above. A URL
  verification is checked by its token (whether Lark signs it is not documented clearly; when the
  headers are there they are checked), and with a key configured it must arrive encrypted.
  Every way an encrypted body can fail to decrypt or parse is one error, so the route is no
  padding oracle.

Without an Encrypt Key only the token vouches for a request (Lark's weaker mode: anyone who learns
the token can forge a click, and a captured click can be replayed, though a replay of a decided
item decides nothing). Configure the key.

**Uncertain field names.** Written against Lark's callback documentation, its official SDKs'
models (``P2CardActionTrigger``: ``operator.open_id``, ``action.value``, ``context.open_message_id``)
and the Python SDK's dispatcher (the signature and decryption above), not against a live tenant.
``action.value`` is read as the JSON object the card sent (Lark's docs also allow a string value;
these cards never send one). The older message-card callback (no ``schema``, ``open_id`` at the
top level, SHA-1 signature over the token) is refused: it carries no app id to check.

Standard library only, plus ``cryptography``, imported when an encrypted body arrives. No clock
is read here: callers pass ``now``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Any

from loopengine.channels import signing
from loopengine.channels.lark.cards import Verdict, parse_button_value
from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.base.jsonsafe import parse_json
from loopengine.domain.base.jsontypes import JsonDict

SIGNATURE_HEADER = "X-Lark-Signature"
TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
DEFAULT_TOLERANCE = 300
"""Seconds the request timestamp may differ from the receiver's clock, either way."""
URL_VERIFICATION = "url_verification"
CARD_ACTION = "card.action.trigger"

_SIGNATURE = re.compile(r"[0-9a-fA-F]{64}")
_NONCE = re.compile(r"[\x21-\x7e]{1,128}")
_OPEN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-.:]{0,127}")
_MAX_ID = 256


LarkRejectReason = signing.RejectReason
"""Why a Lark request failed verification: a webhook's reasons (Lark's own among them)."""


class LarkVerificationError(signing.WebhookVerificationError):
    """A Lark request is not signed, encrypted or tokened as the configuration requires."""


class LarkNotConfigured(ValueError):
    """The request needs a setting this deployment lacks (an encrypted body without an Encrypt Key)."""


@dataclass(frozen=True)
class LarkChallenge:
    """A URL verification: answer ``{"challenge": challenge}``."""

    challenge: str


@dataclass(frozen=True)
class LarkAction:
    """One click on a loopengine callback button: what, on which item, by whom, for which app."""

    decision: Verdict
    pending_id: str
    open_id: str
    app_id: str | None
    answer: str | None = None
    event_id: str | None = None
    message_id: str | None = None

    @property
    def decider(self) -> str:
        """The clicker's identity: ``lark:<open_id>``, whatever the open_id looks like."""
        return f"lark:{self.open_id}"


LarkCallback = LarkChallenge | LarkAction


# -- signature ------------------------------------------------------------------------------


def sign_lark(encrypt_key: str, body: bytes, timestamp: str, nonce: str) -> str:
    """The ``X-Lark-Signature`` Lark sends: hex SHA-256 of timestamp + nonce + key + raw body."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def _headers(timestamp: str | None, nonce: str | None, signature: str | None) -> list[signing.Header]:
    return [
        (TIMESTAMP_HEADER, timestamp, signing.UNIX_SECONDS, "must be unix seconds"),
        (NONCE_HEADER, nonce, _NONCE, "is malformed"),
        (SIGNATURE_HEADER, signature, _SIGNATURE, "must be 64 hex digits"),
    ]


def check_freshness(
    timestamp: str | None,
    nonce: str | None,
    signature: str | None,
    now: float,
    tolerance: int = DEFAULT_TOLERANCE,
) -> int:
    """The checks that need no key: all three headers present and well formed, the timestamp fresh."""
    return signing.check_headers(_headers(timestamp, nonce, signature), now, tolerance, LarkVerificationError)


def verify_signature(
    encrypt_key: str,
    body: bytes,
    timestamp: str | None,
    nonce: str | None,
    signature: str | None,
    now: float,
    tolerance: int = DEFAULT_TOLERANCE,
) -> None:
    """Check ``X-Lark-Signature`` over the raw ``body``; LarkVerificationError says why not."""
    if not encrypt_key:
        raise ValueError("the Lark encrypt key must not be empty")
    headers = _headers(timestamp, nonce, signature)
    sign = functools.partial(sign_lark, encrypt_key, body, timestamp or "", nonce or "")
    signing.verify_headers(headers, now, tolerance, LarkVerificationError, sign)


# -- decryption -----------------------------------------------------------------------------

_UNREADABLE = "the encrypted body cannot be read with the configured Encrypt Key"


def decrypt(encrypt_key: str, data: Any) -> JsonDict:
    """The JSON object inside ``{"encrypt": data}``; one LarkVerificationError for every failure."""
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    unreadable = LarkVerificationError(LarkRejectReason.UNREADABLE, _UNREADABLE)
    if not isinstance(data, str):
        raise unreadable
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise unreadable from None
    if len(raw) < 32 or len(raw) % 16:
        raise unreadable
    key = hashlib.sha256(encrypt_key.encode("utf-8")).digest()
    decryptor = Cipher(algorithms.AES(key), modes.CBC(raw[:16])).decryptor()
    padded = decryptor.update(raw[16:]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        document = parse_json(unpadder.update(padded) + unpadder.finalize(), "the decrypted body")
    except (ValueError, InvalidInput):  # bad padding, not UTF-8, not strict JSON: all the same
        raise unreadable from None
    if not isinstance(document, dict):
        raise unreadable
    return document


# -- the whole check ------------------------------------------------------------------------


def open_callback(
    body: bytes,
    headers: dict[str, str | None],
    *,
    token: str,
    encrypt_key: str | None,
    now: float,
    tolerance: int = DEFAULT_TOLERANCE,
) -> LarkCallback:
    """Verify a callback request as configured and read it.

    ``headers`` maps :data:`TIMESTAMP_HEADER`, :data:`NONCE_HEADER` and :data:`SIGNATURE_HEADER` to
    their values (``None`` when absent). Raises :class:`LarkVerificationError` (unsigned, stale,
    forged, unreadable, wrong token), :class:`LarkNotConfigured` (encrypted without a key) or
    InvalidInput (authentic but not a callback this route handles).
    """
    if not token:
        raise ValueError("the Lark verification token must not be empty")
    timestamp, nonce, signature = (headers.get(h) for h in (TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER))
    signed = False
    if encrypt_key and (timestamp or nonce or signature):
        verify_signature(encrypt_key, body, timestamp, nonce, signature, now, tolerance)
        signed = True
    outer = parse_json(body, "the Lark request body")
    if not isinstance(outer, dict):
        raise InvalidInput("the Lark request body must be a JSON object")
    encrypted = "encrypt" in outer
    if encrypted:
        if not encrypt_key:
            raise LarkNotConfigured("the body is encrypted and no Lark Encrypt Key is configured")
        payload = decrypt(encrypt_key, outer["encrypt"])
    else:
        payload = outer
    check_token(payload, token)
    if payload.get("type") == URL_VERIFICATION and "schema" not in payload:
        if encrypt_key and not (encrypted or signed):
            raise LarkVerificationError(LarkRejectReason.UNSIGNED, "with an Encrypt Key, Lark encrypts")
        return read_challenge(payload)
    if encrypt_key and not signed:
        raise LarkVerificationError(LarkRejectReason.UNSIGNED, f"a card action must carry {SIGNATURE_HEADER}")
    return read_action(payload)


def check_token(payload: JsonDict, token: str) -> None:
    """The body's Verification Token (``header.token``, or ``token``) must be ``token``."""
    header = payload.get("header")
    sent = header.get("token") if isinstance(header, dict) else payload.get("token")
    if not isinstance(sent, str) or not hmac.compare_digest(sent.encode("utf-8"), token.encode("utf-8")):
        raise LarkVerificationError(LarkRejectReason.BAD_TOKEN, "the verification token does not match")


def read_challenge(payload: JsonDict) -> LarkChallenge:
    """The URL verification's challenge (a short printable string)."""
    challenge = payload.get("challenge")
    if (
        not isinstance(challenge, str)
        or not challenge
        or len(challenge) > _MAX_ID
        or not challenge.isprintable()
    ):
        raise InvalidInput("the Lark URL verification has no usable challenge")
    assert isinstance(challenge, str)
    return LarkChallenge(challenge)


def _text(node: Any, key: str) -> str | None:
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, str) and value and len(value) <= _MAX_ID else None


def read_action(payload: JsonDict) -> LarkAction:
    """One click from a schema 2.0 ``card.action.trigger`` callback; InvalidInput for anything else."""
    header = payload.get("header")
    if payload.get("schema") != "2.0" or not isinstance(header, dict):
        raise InvalidInput(
            "only Lark callbacks of schema 2.0 are handled: subscribe the app to card.action.trigger"
        )
    kind = header.get("event_type")
    if kind != CARD_ACTION:
        shown = kind if isinstance(kind, str) and len(kind) <= 80 else "?"
        raise InvalidInput(f"unsupported Lark callback {shown!r}: only {CARD_ACTION} is handled")
    event = payload.get("event")
    if not isinstance(event, dict):
        raise InvalidInput("the Lark callback has no event")
    open_id = _text(event.get("operator"), "open_id")
    if open_id is None or not _OPEN_ID.fullmatch(open_id):
        raise InvalidInput("the Lark callback names no usable operator open_id")
    action = event.get("action")
    if not isinstance(action, dict):
        raise InvalidInput("the Lark callback has no action")
    decision, pending_id, answer = parse_button_value(action.get("value"))
    return LarkAction(
        decision=decision,
        pending_id=pending_id,
        open_id=open_id,
        app_id=_text(header, "app_id"),
        answer=answer,
        event_id=_text(header, "event_id"),
        message_id=_text(event.get("context"), "open_message_id"),
    )
