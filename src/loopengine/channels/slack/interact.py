"""Slack interactivity: the approval message, its buttons, and checking a click that comes back.

One module for both directions, so the sender and the receiver share one definition:

* :func:`approval_blocks` builds the Block Kit message a Slack notifier posts with
  ``chat.postMessage``: what is asked, the arguments, and an Approve and a Deny button
  (:mod:`loopengine.channels.slack.send` is that notifier). :func:`question_blocks` is the message
  for a question: no buttons, since a free-text answer cannot come back through one.
* :func:`verify_slack` checks a request to ``POST /integrations/slack/interactions`` the way Slack
  signs it (see "Verifying requests from Slack"); :func:`parse_interaction` reads the click.

**The button convention.** Each button's ``value`` is ``"<decision>:<pendingId>"``, so
``"approve:pnd_…"`` or ``"deny:pnd_…"`` (:func:`button_value`). The value alone says what to do;
``action_id`` (``approve`` / ``deny``) only keeps the two buttons apart, as Slack requires, and
``block_id`` is informational. Nothing else is trusted from the payload except the clicking user's
id, which Slack vouches for through the signature.

**The signature.** Slack sends ``X-Slack-Request-Timestamp: <unix seconds>`` and
``X-Slack-Signature: v0=<hex HMAC-SHA256(signing secret, "v0:<timestamp>:<raw body>")>``. The MAC
covers the exact bytes on the wire, so verify the raw body *before* decoding it. The timestamp is
checked first (Slack's documented order: a replay is refused without any MAC work), then the
signature, with a constant-time comparison.

Standard library only (plus loopengine's error tree); no clock is read here: callers pass ``now``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from loopengine.channels.signing import RejectReason, WebhookVerificationError
from loopengine.domain.decisions import HumanVerdict
from loopengine.domain.errors import InvalidInput
from loopengine.domain.fate import Fate, FateState
from loopengine.domain.jsonsafe import BadJson, parse_json

JsonDict = dict[str, Any]
Decision = HumanVerdict

SIGNATURE_HEADER = "X-Slack-Signature"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
VERSION = "v0"
DEFAULT_TOLERANCE = 300
"""Seconds the request timestamp may differ from the receiver's clock, either way."""

APPROVE: Decision = "approve"
DENY: Decision = "deny"
DECISIONS: tuple[Decision, ...] = (APPROVE, DENY)

_SIGNATURE = re.compile(r"v0=([0-9a-fA-F]{64})")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_PENDING_ID = re.compile(r"[A-Za-z0-9_\-]{1,128}")
_MAX_FIELDS = 16
_SECTION_LIMIT = 3000  # Slack's limit for a section's text


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


def check_freshness(
    timestamp: str | None, signature: str | None, now: float, tolerance: int = DEFAULT_TOLERANCE
) -> int:
    """The checks that need no secret: both headers present and well formed, timestamp fresh.

    Returns the timestamp. Raises :class:`SlackVerificationError` like :func:`verify_slack`, which
    runs this first; a receiver may also run it on its own to refuse a request that cannot be a
    current Slack request before it looks at its configuration.
    """
    if tolerance < 0:
        raise ValueError("tolerance must not be negative")
    if not timestamp or not signature:
        missing = TIMESTAMP_HEADER if not timestamp else SIGNATURE_HEADER
        raise SlackVerificationError(SlackRejectReason.MISSING_HEADER, f"no {missing} header")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise SlackVerificationError(
            SlackRejectReason.MALFORMED_HEADER, f"{TIMESTAMP_HEADER} must be unix seconds"
        )
    if not _SIGNATURE.fullmatch(signature):
        raise SlackVerificationError(
            SlackRejectReason.MALFORMED_HEADER, f"{SIGNATURE_HEADER} must be v0= and 64 hex digits"
        )
    sent = int(timestamp)
    if abs(now - sent) > tolerance:
        raise SlackVerificationError(
            SlackRejectReason.STALE_TIMESTAMP,
            f"request timestamp is more than {tolerance} s away from the receiver's clock",
        )
    return sent


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
    check_freshness(timestamp, signature, now, tolerance)
    assert timestamp is not None and signature is not None  # checked just above
    expected = sign_slack(signing_secret, body, timestamp)
    if not hmac.compare_digest(expected, signature.lower()):
        raise SlackVerificationError(SlackRejectReason.BAD_SIGNATURE, "signature does not match the body")


# -- the click ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SlackAction:
    """One Approve/Deny click: what was decided, on which item, by which Slack user."""

    decision: Decision
    pending_id: str
    user_id: str
    user_name: str | None
    response_url: str | None
    team_id: str | None = None
    """The workspace the click came from (the payload's ``team.id``)."""


def button_value(decision: Decision, pending_id: str) -> str:
    """The ``value`` of a decision button: ``"approve:<pendingId>"`` or ``"deny:<pendingId>"``."""
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}")
    if not _PENDING_ID.fullmatch(pending_id):
        raise ValueError("pending_id must be 1-128 letters, digits, '_' or '-'")
    return f"{decision}:{pending_id}"


def parse_button_value(value: Any) -> tuple[Decision, str]:
    """Split a button value made by :func:`button_value`; InvalidInput for anything else."""
    if not isinstance(value, str):
        raise InvalidInput("the button value must be a string")
    decision, sep, pending_id = value.partition(":")
    if not sep or decision not in DECISIONS:
        raise InvalidInput("the button value must be 'approve:<pendingId>' or 'deny:<pendingId>'")
    if not _PENDING_ID.fullmatch(pending_id):
        raise InvalidInput("the button value names no valid pendingId")
    return (APPROVE if decision == APPROVE else DENY), pending_id


def parse_interaction(body: bytes) -> SlackAction:
    """Read a ``block_actions`` click from Slack's form body (its ``payload`` field, JSON).

    Raises InvalidInput with a message saying what is wrong for anything that is not one click
    on a loopengine decision button. Verify the body with :func:`verify_slack` first.
    """
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
    kind = payload.get("type")
    if kind != "block_actions":
        raise InvalidInput(f"unsupported Slack interaction type {kind!r}: only block_actions is handled")
    user = payload.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str) or not user["id"]:
        raise InvalidInput("the Slack payload has no user id")
    name = user.get("username") or user.get("name")
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise InvalidInput("the Slack payload has no actions")
    decision, pending_id = parse_button_value(actions[0].get("value"))
    response_url = payload.get("response_url")
    team = payload.get("team")
    team_id = team.get("id") if isinstance(team, dict) else None
    return SlackAction(
        decision=decision,
        pending_id=pending_id,
        user_id=user["id"],
        user_name=name if isinstance(name, str) else None,
        response_url=response_url if isinstance(response_url, str) and response_url else None,
        team_id=team_id if isinstance(team_id, str) and team_id else None,
    )


# -- the message --------------------------------------------------------------------------


def escape(text: str) -> str:
    """Escape ``&``, ``<`` and ``>`` as Slack's mrkdwn requires (no accidental mentions or links)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def approval_blocks(pending_id: str, tool: str, args: JsonDict, reason: str) -> list[JsonDict]:
    """The Block Kit message asking to approve one call, with Approve and Deny buttons.

    The buttons carry :func:`button_value` values, which :func:`parse_interaction` reads back.
    """
    shown = json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    code = _clip(escape(shown).replace("```", "`\u200b``"), _SECTION_LIMIT - 8)
    headline = f"*Approval needed:* `{escape(tool)}`"
    if reason:
        headline += f"\n{escape(reason)}"

    def button(decision: Decision, label: str, style: str) -> JsonDict:
        return {
            "type": "button",
            "action_id": decision,
            "text": {"type": "plain_text", "text": label},
            "style": style,
            "value": button_value(decision, pending_id),
        }

    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": _clip(headline, _SECTION_LIMIT)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"```{code}```"}},
        {
            "type": "actions",
            "block_id": f"loopengine:{pending_id}",
            "elements": [button(APPROVE, "Approve", "primary"), button(DENY, "Deny", "danger")],
        },
        {"type": "context", "elements": [{"type": "mrkdwn", "text": f"pendingId `{pending_id}`"}]},
    ]


def replace_message(text: str) -> JsonDict:
    """A reply that replaces the original message (its buttons go away) with ``text``."""
    return {"replace_original": True, "text": text}


def ephemeral_message(text: str) -> JsonDict:
    """A reply only the clicker sees; the original message and its buttons stay."""
    return {"response_type": "ephemeral", "replace_original": False, "text": text}


def question_blocks(
    pending_id: str, question: str, options: list[str] | None, resolve_url: str | None
) -> list[JsonDict]:
    """The Block Kit message for a pending ``system_ask_user`` question.

    There are no buttons: the answer is free text, which a button cannot carry back (and the
    interactions route decides approvals only). The message says where to answer instead: in the
    app, or with ``POST <resolve_url>`` and ``{"answer": "..."}`` (the API's credentials apply).
    Options, when the model offered some, are listed as suggestions.
    """
    blocks: list[JsonDict] = [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": _clip(f"*Question:* {escape(question)}", _SECTION_LIMIT)},
        }
    ]
    if options:
        listed = "\n".join(f"• {escape(option)}" for option in options)
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": _clip(f"*Options:*\n{listed}", _SECTION_LIMIT)},
            }
        )
    where = "Answer in the app"
    if resolve_url:
        where += f', or POST `{{"answer": "..."}}` to `{escape(resolve_url)}`'
    note = f"{where}. Replies in Slack are not read. pendingId `{escape(pending_id)}`"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _clip(note, _SECTION_LIMIT)}]})
    return blocks


_FATE_WORDS = {
    FateState.APPROVED: "approved",
    FateState.DENIED: "denied",
    FateState.ANSWERED: "answered",
}


def fate_text(fate: Fate) -> str:
    """A late click's reply: what became of the item, and who decided it (a Slack user as a mention)."""
    decision = fate.decision
    if fate.state in _FATE_WORDS and decision is not None:
        who = who_text(decision.decided_by, decision.channel)
        return f"Already resolved: {_FATE_WORDS[fate.state]} by {who}"
    texts = {
        FateState.SKIPPED: "Already resolved: skipped, because another call of the same request was denied",
        FateState.EXPIRED: "Expired: nobody answered in time",
        FateState.SUPERSEDED: "Superseded: the user moved on with a new message",
        FateState.CANCELLED: "Cancelled",
    }
    return texts.get(fate.state, "Already resolved")


def who_text(identity: str, channel: str | None) -> str:
    """``<@U123>`` for a Slack user (Slack renders the name), the identity as text otherwise."""
    if channel == "slack" and identity.removeprefix("slack:").isalnum():
        return f"<@{identity.removeprefix('slack:')}>"
    via = f" via {channel}" if channel else ""
    return f"{escape(identity)}{via}"
