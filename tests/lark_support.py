"""Lark's side of the card callback, written from Lark's documentation (not from loopengine's code).

Signatures (hex SHA-256 of timestamp + nonce + Encrypt Key + raw body), encrypted bodies
(``{"encrypt": base64(IV + AES-256-CBC(SHA-256(key), PKCS#7(json)))}``) and callback documents
shaped like events/lark_interaction.json, for the tests of the route and of the senders.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.handler_support import load_event, with_body

APP_ID = "cli_a1b2c3d4e5f60718"
TOKEN = "local-lark-verification-token"  # the sample event's
KEY = "lark-3ncrypt-k3y"
ALICE, BOB = "ou_7d8a6e6df7621556ce0d21922b676706", "ou_0b3a2f9c51e64f2d8e3b7e4c1a9f0d21"
T0 = 1_735_689_600
NONCE = "13f5a5e7"
HEADERS = ("X-Lark-Request-Timestamp", "X-Lark-Request-Nonce", "X-Lark-Signature")


def lark_signature(key: str, body: bytes, timestamp: str, nonce: str) -> str:
    return hashlib.sha256((timestamp + nonce + key).encode() + body).hexdigest()


def encrypt(key: str, document: Any, iv: bytes | None = None) -> str:
    """What Lark puts in ``{"encrypt": ...}``: base64(IV + AES-256-CBC(SHA-256(key), PKCS#7(json)))."""
    iv = iv or os.urandom(16)
    padder = padding.PKCS7(128).padder()
    data = padder.update(json.dumps(document).encode()) + padder.finalize()
    encryptor = Cipher(algorithms.AES(hashlib.sha256(key.encode()).digest()), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(data) + encryptor.finalize()).decode()


def sample_body() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(load_event("lark_interaction")["body"])
    return body


def action(
    value: Any, open_id: str = ALICE, *, app_id: str | None = APP_ID, token: str = TOKEN
) -> dict[str, Any]:
    """The sample event's card.action.trigger callback with another button value, clicker and app."""
    doc = sample_body()
    doc["header"]["token"] = token
    if app_id is None:
        del doc["header"]["app_id"]
    else:
        doc["header"]["app_id"] = app_id
    doc["event"]["operator"]["open_id"] = open_id
    doc["event"]["action"]["value"] = value
    return doc


def challenge(token: str = TOKEN) -> dict[str, Any]:
    return {"challenge": "ch_9f3c1e0a", "token": token, "type": "url_verification"}


def wire(
    doc: Any,
    *,
    key: str | None = KEY,
    encrypted: bool = True,
    signed: bool = True,
    sign_key: str | None = None,
    sent: int = T0,
) -> tuple[bytes, dict[str, str | None]]:
    """The raw body and the signature headers Lark would send for ``doc``."""
    outer = {"encrypt": encrypt(key, doc)} if encrypted and key else doc
    body = json.dumps(outer).encode()
    headers: dict[str, str | None] = dict.fromkeys(HEADERS)
    if signed and (sign_key or key):
        headers = signed_headers(body, sign_key or key or "", sent)
    return body, headers


def signed_headers(body: bytes, key: str, sent: int = T0) -> dict[str, str | None]:
    return {
        "X-Lark-Request-Timestamp": str(sent),
        "X-Lark-Request-Nonce": NONCE,
        "X-Lark-Signature": lark_signature(key, body, str(sent), NONCE),
    }


def lark_event(doc: Any, now: float, *, skew: float = 0, b64: bool = False, **kw: Any) -> dict[str, Any]:
    """events/lark_interaction.json carrying ``doc`` as Lark would send it now (encrypted, signed)."""
    body, headers = wire(doc, sent=int(now + skew), **kw)
    event = with_body(
        load_event("lark_interaction"), base64.b64encode(body).decode() if b64 else body.decode()
    )
    event["isBase64Encoded"] = b64
    kept = {k: v for k, v in event["headers"].items() if not k.startswith("x-lark-")}
    event["headers"] = {**kept, "content-length": str(len(body))}
    event["headers"].update({k.lower(): v for k, v in headers.items() if v is not None})
    return event
