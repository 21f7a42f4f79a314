"""How records become DynamoDB items: keys, sortable timestamps, and the body codec.

A record's body is its JSON text in one ``data`` string attribute or, when the text is longer than
``COMPRESS_OVER`` bytes and zlib makes it smaller, that text compressed in one ``z1`` binary
attribute (deflate with the preset dictionary :data:`ZDICT_1`): DynamoDB bills writes per started
KB (twice in a transaction) and reads per 4 KB, so a checkpoint of 1.3 KB of JSON costs 2 units a
write and its ~0.5 KB compressed form 1.

DynamoDB refuses items over 400 KB, so a body whose stored form is longer than ``INLINE_LIMIT``
is cut into content-addressed, immutable blob parts of its JSON text (``BLOB#<sha256>`` /
``PART#<i>``, at most ``PART_SIZE`` bytes each) that are written *before* the item referring to
them; that item holds a manifest instead of the body: ``blob`` (the digest) and ``parts`` (how
many). Parts never change, so a compare-and-set on the referencing item stays one conditional
write, and a reader checks the reassembled bytes against the digest.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loopengine.domain.base.errors import StoreError

Item = dict[str, Any]
"""One item (or key) in DynamoDB's wire form, e.g. ``{"pk": {"S": "CP#1"}, "version": {"N": "3"}}``."""

COMPRESS_OVER = 400
"""JSON bodies longer than this (bytes) are stored zlib-compressed when that is smaller.

Shorter ones rarely shrink by the bytes that would take an item under a KB boundary, and stay
readable in the console."""
INLINE_LIMIT = 350_000
"""Largest JSON body (bytes) kept inline in ``data``; longer ones spill into blob parts."""
PART_SIZE = 300_000
"""Bytes per blob part item."""


def s(value: str) -> dict[str, str]:
    """A string attribute value."""
    return {"S": value}


def n(value: int) -> dict[str, str]:
    """A number attribute value."""
    return {"N": str(value)}


def key(pk: str, sk: str) -> Item:
    """The primary key of an item."""
    return {"pk": s(pk), "sk": s(sk)}


def shard_of(record_id: str, shards: int) -> int:
    """The index shard (of ``shards``) of ``record_id``'s entry: a stable hash, the same in every process.

    (Python's ``hash`` of a string is salted per process: the same record would move between
    shards, an index write each time.)
    """
    digest = hashlib.blake2b(record_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def sortable(x: float) -> str:
    """16 hex digits whose string order is the numeric order of ``x`` (IEEE-754 bits, exact)."""
    (bits,) = struct.unpack(">Q", struct.pack(">d", x))
    bits = bits ^ 0xFFFF_FFFF_FFFF_FFFF if bits >> 63 else bits | 1 << 63
    return f"{bits:016x}"


def unsortable(text: str) -> float:
    """The number :func:`sortable` made ``text`` from."""
    bits = int(text, 16)
    bits = bits & ~(1 << 63) if bits >> 63 else bits ^ 0xFFFF_FFFF_FFFF_FFFF
    (x,) = struct.unpack(">d", struct.pack(">Q", bits))
    return float(x)


@dataclass(frozen=True)
class Encoded:
    """A body ready to store: attributes for the referencing item, blob parts to write first."""

    attributes: Item
    parts: list[Item]


ZDICT_1 = (
    b'{"type":"tool_use","id":"toolu_","name":"","input":{}},{"type":"text","text":""}'
    b'{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"toolu_","content":"","is_error":true}]}'
    b'{"role":"user","content":[{"type":"text","text":""}]}'
    b'"resultsSoFar":[],"outstanding":{"pnd_":{"pendingId":"pnd_","toolUseId":"toolu_","tool":"","args":{},'
    b'"kind":"approval","argsHash":"sha256:","decidedBy":"user:","decidedAt":,"decision":"deny",'
    b'"calls":[{"toolUseId":"toolu_","tool":"","startedAt":,"outcome":"ok","result":'
    b'{"type":"tool_result","tool_use_id":"toolu_","content":""},"finishedAt":}]'
    b'"events":[{"n":,"e":[{"type":"started","at":,"trigger":"message","configHash":"sha256:"}]},'
    b'{"type":"model_response","at":,"stopReason":"tool_use","toolUses":[],"text":""},'
    b'{"type":"tool_outcome","at":,"toolUseId":"toolu_","tool":"","outcome":"ok","idempotencyKey":"le_"},'
    b'{"type":"paused","at":,"pendingIds":["pnd_"],"checkpointId":"cp_"},'
    b'{"type":"decided","at":,"pendingId":"pnd_","decision":"approve","edited":false,"comment":null,'
    b'"decidedBy":"user:","channel":"api"},{"type":"resumed","at":,"claimedFrom":"ready"},'
    b'{"type":"finished","at":,"stopReason":"end_turn","text":""}'
    b'{"turnId":"trn_","sessionId":"ses_","agent":"","tenant":"","configHash":"sha256:","startSeq":,'
    b'"createdAt":,"trigger":"message","status":"running","stopReason":"pending_approval",'
    b'"checkpointId":"cp_","verdicts":{"toolu_":{"decision":"allow","reason":"rule:  -> allow","rule":0,'
    b'"approvers":[]},"toolu_":{"decision":"ask","reason":"no rule matched ; default_decision is ask",'
    b'"rule":null,"approvers":[]}},"leaseUntil":,"scopedSession":true,"runner":"run_","dueAt":,'
    b'"updatedAt":,"version":,"log":{"events":[{"n":,"e":[{"type":"'
)
"""The preset dictionary of ``z1`` bodies: the keys and words loopengine's records repeat (deflate
finds them here instead of in the body, so a small record compresses about twice as far). Never
changed: items hold bodies compressed with it. A better one is ``ZDICT_2``, stored as ``z2``."""


def encode(value: Any, limit: int = INLINE_LIMIT) -> Encoded:
    """Inline JSON if it fits in ``limit`` bytes, else a manifest plus content-addressed parts.

    Inline JSON longer than ``COMPRESS_OVER`` is stored compressed (``z1``: with :data:`ZDICT_1`)
    when that is smaller.
    """
    text = json.dumps(value, separators=(",", ":"))  # ASCII only (ensure_ascii), so len() is bytes
    raw = text.encode("ascii")
    if len(text) > COMPRESS_OVER:
        packer = zlib.compressobj(9, zdict=ZDICT_1)
        packed = packer.compress(raw) + packer.flush()
        if len(packed) < len(raw) and len(packed) <= limit:
            return Encoded({"z1": {"B": packed}}, [])
    if len(text) <= limit:
        return Encoded({"data": s(text)}, [])
    digest = hashlib.sha256(raw).hexdigest()
    chunks = [raw[i : i + PART_SIZE] for i in range(0, len(raw), PART_SIZE)]
    parts = [{**key(f"BLOB#{digest}", f"PART#{i:05d}"), "part": {"B": c}} for i, c in enumerate(chunks)]
    return Encoded({"blob": s(digest), "parts": n(len(chunks))}, parts)


def inline(item: Item) -> tuple[bool, Any]:
    """``(True, body)`` for an item holding its body inline (compressed or not); ``(False, None)`` else."""
    if "data" in item:
        return True, json.loads(item["data"]["S"])
    if "z1" not in item:
        return False, None
    try:
        unpacker = zlib.decompressobj(zdict=ZDICT_1)
        text = unpacker.decompress(bytes(item["z1"]["B"])) + unpacker.flush()
        if not unpacker.eof:
            raise ValueError("cut short")
        return True, json.loads(text)
    except (zlib.error, ValueError) as exc:  # never a wrong record, never a stack trace upstream
        raise StoreError(f"item {item.get('pk', {}).get('S', '?')}: its compressed body is corrupt") from exc


def manifest(item: Item) -> tuple[str, int]:
    """The blob digest and part count of an item whose body spilled."""
    return item["blob"]["S"], int(item["parts"]["N"])


def reassemble(digest: str, count: int, parts: Sequence[Item]) -> Any:
    """The body from its parts (in key order), verified against the digest and the part count."""
    raw = b"".join(bytes(part["part"]["B"]) for part in parts)
    if len(parts) != count or hashlib.sha256(raw).hexdigest() != digest:
        raise StoreError(f"blob {digest} is incomplete or corrupt ({len(parts)} of {count} parts)")
    return json.loads(raw)
