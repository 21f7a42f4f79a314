"""Random identifiers: 128 bits from the OS CSPRNG, hex encoded."""

from __future__ import annotations

import secrets


def new_id(prefix: str = "") -> str:
    """Return ``prefix`` + 32 hex chars (128 random bits)."""
    return f"{prefix}{secrets.token_hex(16)}"
