"""The HTTP side of ``loopengine chat``: JSON requests to a loopengine API, standard library only.

Every request carries the caller's Basic credentials (if any) and ``X-Loopengine-Channel: live``,
so the decisions made in the chat are recorded with channel ``live``. Errors are values, not
exceptions: :meth:`ChatClient.call` returns ``(status, body)`` and raises only
:class:`Unreachable` when no answer came at all.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

JsonDict = dict[str, Any]
CHANNEL_HEADER = "X-Loopengine-Channel"


class Unreachable(Exception):
    """The server did not answer (refused, reset, timed out, not HTTP)."""


class ChatClient:
    """A small JSON client for one loopengine base URL."""

    def __init__(self, base_url: str, auth: str | None = None, timeout: float = 30.0) -> None:
        self.base = base_url.rstrip("/")
        self.auth = auth
        self.timeout = timeout

    def call(
        self, method: str, path: str, body: JsonDict | None = None, timeout: float | None = None
    ) -> tuple[int, JsonDict]:
        """``method path`` with a JSON body; the status and the JSON answer (``{}`` when not JSON)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        req.add_header(CHANNEL_HEADER, "live")
        if self.auth:
            req.add_header("Authorization", "Basic " + base64.b64encode(self.auth.encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return resp.status, _json(resp.read())
        except urllib.error.HTTPError as err:
            with err:
                return err.code, _json(err.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(f"cannot reach {self.base}: {reason}") from None

    def send(self, agent: str, message: str, session_id: str | None) -> tuple[int, JsonDict]:
        """Post a live message to ``agent``."""
        body: JsonDict = {"message": message, "live": True}
        if session_id:
            body["sessionId"] = session_id
        return self.call("POST", f"/agents/{quote(agent, safe='')}/messages", body)

    def events(self, turn_id: str, after: int, wait: float) -> tuple[int, JsonDict]:
        """The turn's events after ``after``, long-polled up to ``wait`` seconds."""
        path = f"/turns/{quote(turn_id, safe='')}/events?after={after}&wait={wait:g}"
        return self.call("GET", path, timeout=wait + self.timeout)

    def resolve(self, pending_id: str, body: JsonDict) -> tuple[int, JsonDict]:
        """Approve or deny one pending approval."""
        return self.call("POST", f"/pending-approvals/{quote(pending_id, safe='')}/resolve", body)

    def answer(self, pending_id: str, answer: str) -> tuple[int, JsonDict]:
        """Answer one pending question."""
        return self.call(
            "POST", f"/pending-questions/{quote(pending_id, safe='')}/answer", {"answer": answer}
        )


def _json(raw: bytes) -> JsonDict:
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
