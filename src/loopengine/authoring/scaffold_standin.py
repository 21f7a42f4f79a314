"""The stand-in payment API ``loopengine new-agent`` writes beside the charge tool (``payments_standin.py``).

A Python string, like :mod:`.scaffold_templates`, so it ships inside the package however it is installed.
"""

from __future__ import annotations

STANDIN_PY = '''\
"""A stand-in payment API for the charge tool, offline: POST /charges honours Idempotency-Key.

    python payments_standin.py [--port 8790]      (--port 0: any free port; the first line says which)

POST /charges ``{customer, amount_cents, currency, reason, metadata?}`` needs an Idempotency-Key
header: a new key charges once (201); the same key with the same body answers that same charge
again (200, ``Idempotent-Replayed: true``) and charges nothing; the same key with another body is
422. GET /charges?idempotency_key=KEY finds a charge by its key (what an operator does about an
``unknown`` outcome); GET /charges lists every charge. Everything lives in memory.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

LOCK = threading.Lock()
CHARGES: dict[str, dict[str, Any]] = {}
"""Idempotency key -> the charge it made (with the hash of the body that made it)."""


class Payments(BaseHTTPRequestHandler):
    """The two routes."""

    def do_POST(self) -> None:
        """Charge once per Idempotency-Key."""
        if urlparse(self.path).path != "/charges":
            return self._send(404, {"error": "not found"})
        key = self.headers.get("Idempotency-Key", "")
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not key:
            return self._send(400, {"error": "an Idempotency-Key header is required"})
        try:
            body = json.loads(raw)
            amount, currency = int(body["amount_cents"]), str(body["currency"])
        except (ValueError, KeyError, TypeError):
            return self._send(400, {"error": "need JSON with amount_cents and currency"})
        digest = hashlib.sha256(raw).hexdigest()
        with LOCK:
            known = CHARGES.get(key)
            if known is None:
                CHARGES[key] = known = {
                    "id": "ch_" + uuid.uuid4().hex[:16],
                    "amount_cents": amount,
                    "currency": currency,
                    "status": "succeeded",
                    "idempotency_key": key,
                    "customer": body.get("customer"),
                    "metadata": body.get("metadata"),
                    "body_sha256": digest,
                }
                return self._send(201, known)
        if known["body_sha256"] != digest:
            return self._send(422, {"error": "this Idempotency-Key was used with another request"})
        return self._send(200, known, replayed=True)

    def do_GET(self) -> None:
        """A charge by its key, or all of them."""
        url = urlparse(self.path)
        if url.path != "/charges":
            return self._send(404, {"error": "not found"})
        key = parse_qs(url.query).get("idempotency_key", [None])[0]
        with LOCK:
            found = [c for k, c in CHARGES.items() if key is None or k == key]
        return self._send(200, {"charges": found})

    def _send(self, status: int, body: dict[str, Any], replayed: bool = False) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if replayed:
            self.send_header("Idempotent-Replayed", "true")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt: str, *args: Any) -> None:
        """Quiet."""


def main() -> None:
    """Serve on 127.0.0.1 until Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8790)
    server = ThreadingHTTPServer(("127.0.0.1", parser.parse_args().port), Payments)
    print(f"payments stand-in on http://127.0.0.1:{server.server_port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
'''
