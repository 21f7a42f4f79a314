"""Identifiers: random ones we hand out, and the formats the HTTP edge accepts.

Ids the product makes are a prefix plus 128 bits from the OS CSPRNG, hex encoded (``pnd_`` pending
items, ``trn_`` turns, ``ses_`` sessions). A client may choose its own sessionId and tenant; those
must be short, printable ASCII of a fixed alphabet, so they are safe as store keys and in logs.
"""

from __future__ import annotations

import re
import secrets

PENDING_PREFIX = "pnd_"
TURN_PREFIX = "trn_"
SESSION_PREFIX = "ses_"
MAX_CLIENT_ID_CHARS = 128

_HEX32 = "[0-9a-f]{32}"
_PENDING = re.compile(PENDING_PREFIX + _HEX32)
_TURN = re.compile(TURN_PREFIX + _HEX32)
_CLIENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}")


def new_id(prefix: str = "") -> str:
    """Return ``prefix`` + 32 hex chars (128 random bits)."""
    return f"{prefix}{secrets.token_hex(16)}"


def is_pending_id(value: object) -> bool:
    """Whether ``value`` has the form of a pendingId we hand out (``pnd_`` + 32 lowercase hex)."""
    return isinstance(value, str) and _PENDING.fullmatch(value) is not None


def is_turn_id(value: object) -> bool:
    """Whether ``value`` has the form of a turnId we hand out (``trn_`` + 32 lowercase hex)."""
    return isinstance(value, str) and _TURN.fullmatch(value) is not None


def is_session_id(value: object) -> bool:
    """Whether ``value`` is an acceptable sessionId: ours (``ses_`` + hex) or a client's own.

    A letter or digit, then up to 127 of letters, digits and ``_ . : @ -``; nothing else (no
    spaces, control characters, surrogates or non-ASCII).
    """
    return isinstance(value, str) and _CLIENT_ID.fullmatch(value) is not None


def session_key(tenant: str, session_id: str) -> str:
    """Where a session is stored: its id within its tenant (two tenants' "s1" are two sessions).

    The default tenant's sessions keep their bare id; another tenant's are ``<tenant>/<id>`` (``/``
    appears in neither a tenant nor a sessionId, see :func:`is_session_id`).
    """
    return f"{tenant}/{session_id}" if tenant else session_id


def is_tenant(value: object) -> bool:
    """Whether ``value`` is an acceptable tenant: empty (no tenant) or of the sessionId form."""
    return value == "" or is_session_id(value)
