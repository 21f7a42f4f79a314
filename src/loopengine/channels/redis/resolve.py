"""Deciding a popped entry through loopengine's HTTP API: the consumer's half of the ``redis`` channel.

An :class:`Entry` is one popped notification (the webhook's JSON body); a :class:`Verdict` is what
the consumer decided; :class:`ApiResolver` sends it to the normal routes with the consumer's own
credentials (HTTP Basic for ``LOOPENGINE_USERS`` / ``LOOPENGINE_ADMIN_AUTH``, a bearer token behind
the JWT authorizer):

    approval  POST {api}/pending-approvals/{pendingId}/resolve
              {"decision", "argsHash", "editedArgs"?, "comment"?}
    question  POST {api}/pending-questions/{pendingId}/answer  {"answer"}

Deny by default, because anyone who can write to the Redis key can write an entry:

* the request goes to the resolver's own ``api`` URL, never to the entry's ``resolveUrl`` (an
  entry naming another host would otherwise collect the consumer's credentials);
* the ``pendingId`` must have the product's id form (``pnd_`` + 32 hex) and the ``eventId`` its
  form (``evt_`` + 32 hex), so nothing else reaches the path or a Redis key;
* an approval is sent with the hash of the tool and arguments the entry shows (``argsHash``): the
  server refuses it (409) unless they are the item's, so what the decider saw is what runs (an
  entry whose own ``argsHash`` disagrees with its arguments is refused without a request);
* the server checks everything else (tenant, approvers, edited arguments) as for any caller.

Errors: :class:`ResolveError` carries the status (``None`` for a network failure) and whether
trying again later may help (``retryable``: a timeout, a refused connection, 401, 429 and 5xx).
Any other answer (400, 403, 404, 409, ...) decides nothing and will not change on a retry.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from loopengine.authoring.agent_schema import EVENTS
from loopengine.authoring.tools import args_hash
from loopengine.channels import http
from loopengine.domain.base.ids import is_pending_id

if TYPE_CHECKING:
    import httpx

EVENT_ID = re.compile(r"evt_[0-9a-f]{32}")
"""The form of the ``eventId`` the outbox gives every notification."""
USER_AGENT = "loopengine-redis-consumer/0.1"
RETRYABLE = frozenset({401, 408, 425, 429})
"""Statuses a later try may change (besides every 5xx): credentials fixed, load gone."""


@dataclass(frozen=True)
class Entry:
    """One popped notification: the webhook's JSON body, or why it could not be read (``problem``)."""

    body: dict[str, Any]
    raw: bytes
    stream_id: str | None = None
    problem: str | None = None
    forged: bool = False
    """Its signature did not verify (or it had none): ``problem`` says why; it decides nothing."""

    @staticmethod
    def parse(raw: bytes, stream_id: str | None = None) -> Entry:
        """Read ``raw``; an entry that is not a notification body has ``problem`` set (never raises)."""
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return Entry({}, raw, stream_id, "not JSON")
        if not isinstance(body, dict):
            return Entry({}, raw, stream_id, "not a JSON object")
        if body.get("event") not in EVENTS:
            return Entry(body, raw, stream_id, "no known event")
        if not isinstance(body.get("eventId"), str) or not EVENT_ID.fullmatch(body["eventId"]):
            return Entry(body, raw, stream_id, "no eventId of the form evt_<32 hex>")
        if body["event"] in ("approval", "question") and not is_pending_id(body.get("pendingId")):
            return Entry(body, raw, stream_id, "no pendingId of the form pnd_<32 hex>")
        if body["event"] == "approval" and not (
            isinstance(body.get("tool"), str) and isinstance(body.get("args"), dict)
        ):
            return Entry(body, raw, stream_id, "an approval without tool and args")
        return Entry(body, raw, stream_id)

    @property
    def event(self) -> str:
        """``approval``, ``question``, ``run_start`` or ``run_finish`` (``""`` when unreadable)."""
        return str(self.body.get("event", "")) if self.problem is None else ""

    @property
    def event_id(self) -> str:
        """The notification's stable id (``""`` when unreadable): what duplicates share."""
        return str(self.body.get("eventId", "")) if self.problem is None else ""

    @property
    def pending_id(self) -> str:
        """The item to decide (``""`` for run_start / run_finish and unreadable entries)."""
        return str(self.body.get("pendingId", "")) if self.event in ("approval", "question") else ""


@dataclass(frozen=True)
class Verdict:
    """What the consumer decided: approve (maybe with edited arguments), deny, or an answer."""

    decision: Literal["approve", "deny", "answer"]
    answer: str | None = None
    edited_args: dict[str, Any] | None = None
    comment: str | None = None

    @staticmethod
    def approve(edited_args: dict[str, Any] | None = None, comment: str | None = None) -> Verdict:
        """Run the call (with ``edited_args`` in place of the model's, if given)."""
        return Verdict("approve", edited_args=edited_args, comment=comment)

    @staticmethod
    def deny(comment: str | None = None) -> Verdict:
        """Refuse the call (its turn finishes as ``denied``)."""
        return Verdict("deny", comment=comment)

    @staticmethod
    def reply(answer: str) -> Verdict:
        """Answer a question."""
        return Verdict("answer", answer=answer)


class ResolveError(Exception):
    """The API did not take a verdict: ``status`` (None: no answer) and whether a retry may help."""

    def __init__(self, message: str, status: int | None, retryable: bool, body: Any = None) -> None:
        """A failure to decide; ``body`` is the API's JSON error, when there was one."""
        super().__init__(message)
        self.status, self.retryable, self.body = status, retryable, body


def basic_auth(user_password: str) -> str:
    """The ``Authorization`` value for ``user:password`` (as ``LOOPENGINE_ADMIN_AUTH`` holds it)."""
    if ":" not in user_password:
        raise ValueError("expected user:password")
    return "Basic " + base64.b64encode(user_password.encode("utf-8")).decode("ascii")


def request_for(entry: Entry, verdict: Verdict) -> tuple[str, dict[str, Any]]:
    """The route path and JSON body for ``verdict`` on ``entry``; ResolveError when they do not fit."""
    if entry.problem is not None or not is_pending_id(entry.pending_id):
        raise ResolveError(f"entry cannot be decided: {entry.problem or 'no pending item'}", None, False)
    if entry.event == "question":
        if verdict.decision != "answer" or not isinstance(verdict.answer, str):
            raise ResolveError("a question takes an answer (Verdict.reply)", None, False)
        return f"/pending-questions/{entry.pending_id}/answer", {"answer": verdict.answer}
    if verdict.decision == "answer":
        raise ResolveError("an approval takes approve or deny, not an answer", None, False)
    shown = args_hash(entry.body["tool"], entry.body["args"])
    if entry.body.get("argsHash") != shown:
        raise ResolveError("the entry's argsHash is not the hash of its tool and args", None, False)
    body: dict[str, Any] = {"decision": verdict.decision, "argsHash": shown}
    if verdict.edited_args is not None:
        body["editedArgs"] = verdict.edited_args
    if verdict.comment:
        body["comment"] = verdict.comment
    return f"/pending-approvals/{entry.pending_id}/resolve", body


class ApiResolver:
    """Sends verdicts to one loopengine API with one set of credentials."""

    def __init__(
        self,
        api_url: str,
        authorization: str,
        *,
        timeout: float = 10.0,
        wait: float | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """Decide at ``api_url`` (https, or http to a loopback host) sending ``authorization``.

        ``wait`` (seconds, at most 25) asks the resolve routes to answer with the turn's outcome
        when the decision resumes it. Raises ValueError for an unusable URL.
        """
        parts = http.split_url(api_url, "api_url", ValueError)
        http.require_https(parts, "api_url", ValueError)
        if http.has_credentials(parts) or parts.query or parts.fragment or not parts.hostname:
            raise ValueError("api_url is scheme://host[:port][/base path], without credentials or query")
        if wait is not None and not 0 < wait <= 25:
            raise ValueError("wait is more than 0 and at most 25 seconds")
        self.api_url = api_url.rstrip("/")
        self._authorization = authorization
        self._timeout, self._wait, self._transport = timeout, wait, transport

    def __repr__(self) -> str:
        """The API (never the credentials)."""
        return f"ApiResolver({self.api_url!r})"

    def resolve(self, entry: Entry, verdict: Verdict) -> tuple[int, dict[str, Any]]:
        """Send ``verdict``; the status and JSON answer on 2xx, else :class:`ResolveError`."""
        import httpx

        path, body = request_for(entry, verdict)
        headers = {"Authorization": self._authorization, "User-Agent": USER_AGENT}
        params = {"wait": f"{self._wait:g}"} if self._wait else None
        timeout = self._timeout + (self._wait or 0)
        try:
            client = httpx.Client(
                transport=self._transport, timeout=timeout, follow_redirects=False, verify=http.tls_context()
            )
            with client:
                response = client.post(self.api_url + path, json=body, headers=headers, params=params)
        except httpx.HTTPError as exc:
            raise ResolveError(f"{path}: no answer ({type(exc).__name__})", None, True) from None
        try:
            answer = response.json()
        except ValueError:
            answer = None
        status = response.status_code
        if 200 <= status < 300 and isinstance(answer, dict):
            return status, answer
        retryable = status >= 500 or status in RETRYABLE
        raise ResolveError(f"{path}: answered {status}", status, retryable, answer)
