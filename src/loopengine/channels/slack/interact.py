"""Slack interactivity, the receiving side: checking a request, and reading what it asks.

:func:`verify_slack` checks a request to ``POST /integrations/slack/interactions`` the way Slack
signs it (see "Verifying requests from Slack"); :func:`parse_interaction` reads it:

* a ``block_actions`` click on one of loopengine's buttons (:class:`SlackAction`): the button's
  value (:mod:`loopengine.channels.slack.values`) says what it asks for (approve, deny, answer with
  option ``n``, open the answer modal), the payload who clicked, in which workspace, and the
  ``response_url`` / ``trigger_id`` to answer through;
* a ``view_submission`` of loopengine's answer modal (:class:`SlackSubmission`): the typed answer,
  and the pendingId the modal was opened for (its ``private_metadata``).

Nothing else is trusted from the payload except the clicking user's id and workspace, which Slack
vouches for through the signature. The messages and the modal are
:mod:`loopengine.channels.slack.blocks`' (re-exported here under their old names).

**The signature.** Slack sends ``X-Slack-Request-Timestamp: <unix seconds>`` and
``X-Slack-Signature: v0=<hex HMAC-SHA256(signing secret, "v0:<timestamp>:<raw body>")>``. The MAC
covers the exact bytes on the wire, so verify the raw body *before* decoding it. The timestamp is
checked first (Slack's documented order: a replay is refused without any MAC work), then the
signature, with a constant-time comparison.

Standard library only (plus loopengine's error tree); no clock is read here: callers pass ``now``.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from loopengine.channels.signing import (
    UNIX_SECONDS,
    Header,
    RejectReason,
    WebhookVerificationError,
    check_headers,
    verify_headers,
)
from loopengine.channels.slack.blocks import (
    ANSWER_ACTION,
    ANSWER_BLOCK,
    MODAL_CALLBACK,
    approval_blocks,
    ephemeral_message,
    escape,
    fate_text,
    question_blocks,
    replace_message,
    who_text,
)
from loopengine.channels.slack.values import (
    APPROVE,
    DENY,
    PENDING_ID,
    TEXT,
    Verb,
    parse_value,
)
from loopengine.channels.slack.values import button_value as make_value
from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.base.jsonsafe import BadJson, parse_json
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.decisions import HumanVerdict

__all__ = [
    "APPROVE",
    "DECISIONS",
    "DENY",
    "TEXT",
    "JsonDict",
    "SlackAction",
    "SlackRejectReason",
    "SlackSubmission",
    "SlackVerificationError",
    "approval_blocks",
    "button_value",
    "check_freshness",
    "ephemeral_message",
    "escape",
    "fate_text",
    "parse_button_value",
    "parse_interaction",
    "question_blocks",
    "replace_message",
    "sign_slack",
    "verify_slack",
    "who_text",
]

Decision = HumanVerdict
DECISIONS: tuple[Decision, ...] = ("approve", "deny")

SIGNATURE_HEADER = "X-Slack-Signature"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
VERSION = "v0"
DEFAULT_TOLERANCE = 300
"""Seconds the request timestamp may differ from the receiver's clock, either way."""

_SIGNATURE = re.compile(r"v0=([0-9a-fA-F]{64})")
_MAX_FIELDS = 16


SlackRejectReason = RejectReason
"""Why a Slack request failed verification: the same reasons as a webhook's."""


class SlackVerificationError(WebhookVerificationError):
    """A Slack request's signature headers are missing, malformed, stale or do not match."""


# -- verifying ----------------------------------------------------------------------------


def sign_slack(signing_secret: str, body: bytes, timestamp: int | str) -> str:
    """Return the ``X-Slack-Signature`` value Slack would send for ``body`` at ``timestamp``."""
    base = f"{VERSION}:{timestamp}:".encode("ascii") + body
    mac = hmac.new(signing_secret.encode("utf-8"), base, hashlib.sha256).hexdigest()
    return f"{VERSION}={mac}"


def _headers(timestamp: str | None, signature: str | None) -> list[Header]:
    return [
        (TIMESTAMP_HEADER, timestamp, UNIX_SECONDS, "must be unix seconds"),
        (SIGNATURE_HEADER, signature, _SIGNATURE, "must be v0= and 64 hex digits"),
    ]


def check_freshness(
    timestamp: str | None, signature: str | None, now: float, tolerance: int = DEFAULT_TOLERANCE
) -> int:
    """The checks that need no secret: both headers present and well formed, timestamp fresh.

    Returns the timestamp. Raises :class:`SlackVerificationError` like :func:`verify_slack`, which
    runs this first; a receiver may also run it on its own to refuse a request that cannot be a
    current Slack request before it looks at its configuration.
    """
    return check_headers(_headers(timestamp, signature), now, tolerance, SlackVerificationError)


def verify_slack(
    signing_secret: str,
    body: bytes,
    timestamp: str | None,
    signature: str | None,
    now: float,
    tolerance: int = DEFAULT_TOLERANCE,
) -> None:
    """Check that ``body`` was signed by Slack with ``signing_secret`` within ``tolerance`` s of ``now``.

    ``timestamp`` and ``signature`` are the raw values of ``X-Slack-Request-Timestamp`` and
    ``X-Slack-Signature`` (``None`` when absent); ``body`` is the raw request body, exactly as
    received. Returns ``None`` when the request is authentic and fresh, otherwise raises
    :class:`SlackVerificationError` whose ``reason`` says why. The comparison is constant time.
    """
    if not signing_secret:
        raise ValueError("the Slack signing secret must not be empty")
    sign = functools.partial(sign_slack, signing_secret, body, timestamp or "")
    verify_headers(_headers(timestamp, signature), now, tolerance, SlackVerificationError, sign)


# -- what a request asks ----------------------------------------------------------------------


@dataclass(frozen=True)
class SlackAction:
    """One click on a loopengine button: what it asks for, on which item, by which Slack user."""

    decision: Verb
    pending_id: str
    user_id: str
    user_name: str | None
    response_url: str | None
    team_id: str | None = None
    """The workspace the click came from (the payload's ``team.id``)."""
    option: int | None = None
    """For ``answer``: the option's number (its text is the pending item's, not the payload's)."""
    trigger_id: str | None = None
    """For ``text``: what ``views.open`` needs to open the modal (good for 3 s)."""


@dataclass(frozen=True)
class SlackSubmission:
    """The answer modal submitted: the typed answer, for which item, by which Slack user."""

    pending_id: str
    user_id: str
    user_name: str | None
    team_id: str | None
    answer: str
    response_url: str | None = None
    """The response_url of the message the modal was opened from (to update it)."""


SlackRequest = SlackAction | SlackSubmission


def button_value(decision: Decision, pending_id: str) -> str:
    """The ``value`` of a decision button: ``"approve:<pendingId>"`` or ``"deny:<pendingId>"``."""
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}")
    return make_value(APPROVE if decision == "approve" else DENY, pending_id)


def parse_button_value(value: Any) -> tuple[Decision, str]:
    """Split an approve/deny button value; InvalidInput for anything else."""
    parsed = parse_value(value)
    if parsed.verb not in DECISIONS:
        raise InvalidInput("the button value must be 'approve:<pendingId>' or 'deny:<pendingId>'")
    return ("approve" if parsed.verb == APPROVE else "deny"), parsed.pending_id


def _payload(body: bytes) -> JsonDict:
    """The JSON object in the form body's one ``payload`` field; InvalidInput otherwise."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("the Slack request body is not UTF-8") from None
    try:
        fields = parse_qs(text, keep_blank_values=True, max_num_fields=_MAX_FIELDS, errors="strict")
    except ValueError:
        raise InvalidInput("the Slack request body is not a form") from None
    raw = fields.get("payload")
    if raw is None or len(raw) != 1:
        raise InvalidInput("the Slack request needs exactly one 'payload' form field")
    try:
        payload = parse_json(raw[0], "the Slack 'payload' field")
    except BadJson:
        raise InvalidInput("the Slack 'payload' field is not valid JSON") from None
    if not isinstance(payload, dict):
        raise InvalidInput("the Slack 'payload' must be a JSON object")
    return payload


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _user(payload: JsonDict) -> tuple[str, str | None, str | None]:
    """``(user id, user name, team id)``; InvalidInput without a user id."""
    user = payload.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str) or not user["id"]:
        raise InvalidInput("the Slack payload has no user id")
    name = _text(user.get("username")) or _text(user.get("name"))
    team = payload.get("team")
    return user["id"], name, _text(team.get("id")) if isinstance(team, dict) else None


def parse_interaction(body: bytes) -> SlackRequest:
    """Read a click (``block_actions``) or the answer modal's ``view_submission`` from Slack's form body.

    Raises InvalidInput with a message saying what is wrong for anything else. Verify the body with
    :func:`verify_slack` first.
    """
    payload = _payload(body)
    kind = payload.get("type")
    if kind == "view_submission":
        return _submission(payload)
    if kind != "block_actions":
        raise InvalidInput(
            f"unsupported Slack interaction type {kind!r}: only block_actions and view_submission are handled"
        )
    user_id, name, team_id = _user(payload)
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise InvalidInput("the Slack payload has no actions")
    value = parse_value(actions[0].get("value"))
    return SlackAction(
        decision=value.verb,
        pending_id=value.pending_id,
        user_id=user_id,
        user_name=name,
        response_url=_text(payload.get("response_url")),
        team_id=team_id,
        option=value.option,
        trigger_id=_text(payload.get("trigger_id")),
    )


def _submission(payload: JsonDict) -> SlackSubmission:
    user_id, name, team_id = _user(payload)
    view = payload.get("view")
    if not isinstance(view, dict) or view.get("callback_id") != MODAL_CALLBACK:
        raise InvalidInput("the Slack view_submission is not of loopengine's answer modal")
    try:
        metadata = parse_json(view.get("private_metadata") or "", "the modal's private_metadata")
    except (BadJson, InvalidInput):
        metadata = None
    pending_id = metadata.get("pendingId") if isinstance(metadata, dict) else None
    if not isinstance(pending_id, str) or not PENDING_ID.fullmatch(pending_id):
        raise InvalidInput("the answer modal's private_metadata names no valid pendingId")
    assert isinstance(metadata, dict)  # pending_id came from it
    state = view.get("state")
    values = state.get("values") if isinstance(state, dict) else None
    block = values.get(ANSWER_BLOCK) if isinstance(values, dict) else None
    field = block.get(ANSWER_ACTION) if isinstance(block, dict) else None
    if not isinstance(field, dict):
        raise InvalidInput("the answer modal's submission has no answer field")
    answer = field.get("value")
    return SlackSubmission(
        pending_id=pending_id,
        user_id=user_id,
        user_name=name,
        team_id=team_id,
        answer=answer if isinstance(answer, str) else "",
        response_url=_text(metadata.get("responseUrl")),
    )
