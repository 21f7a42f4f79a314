"""What loopengine shows in Slack: the Block Kit messages, the answer modal, and the replies to clicks.

* :func:`approval_blocks`: the call, its arguments, an Approve and a Deny button;
* :func:`question_blocks`: the question, one button per option (up to
  :data:`~loopengine.channels.slack.values.MAX_OPTIONS`; more are listed as text), and a "Type an
  answer" button that opens :func:`answer_modal` (``views.open``);
* :func:`answer_modal`: a modal with the question and one text input; its ``private_metadata``
  carries the pendingId (and the message's ``response_url``, so the message can be updated once
  the answer is in). Slack returns both with the ``view_submission``, signed like every request;
* :func:`replace_message` / :func:`ephemeral_message`: the replies to a click; :func:`notice_view`
  and :func:`submission_errors`: the replies to a modal's submission; :func:`fate_text`: what
  became of an item, for a late click or submission.

Everything the model wrote goes into ``mrkdwn`` escaped (:func:`escape`: no mentions, no links) or
into ``plain_text``, and is clipped to Slack's limits.
"""

from __future__ import annotations

import json

from loopengine.channels.slack.values import (
    ANSWER,
    APPROVE,
    DENY,
    MAX_OPTIONS,
    TEXT,
    Verb,
    button_value,
)
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.fate import Fate, FateState

SECTION_LIMIT = 3000
"""Slack's limit for a section's text."""
BUTTON_LABEL_LIMIT = 75
ANSWER_LIMIT = 3000
"""The longest answer the modal takes (Slack's ``plain_text_input`` allows 3000)."""
METADATA_LIMIT = 3000
MODAL_CALLBACK = "loopengine_answer"
"""The modal's ``callback_id``: a ``view_submission`` with another is not ours."""
ANSWER_BLOCK = "answer"
ANSWER_ACTION = "answer"
TYPE_AN_ANSWER = "Type an answer"


def escape(text: str) -> str:
    """Escape ``&``, ``<`` and ``>`` as Slack's mrkdwn requires (no accidental mentions or links)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plain(text: str, limit: int = SECTION_LIMIT) -> JsonDict:
    """A ``plain_text`` object."""
    return {"type": "plain_text", "text": clip(text, limit)}


def section(text: str) -> JsonDict:
    """A ``mrkdwn`` section (``text`` already escaped)."""
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(text, SECTION_LIMIT)}}


def button(
    verb: Verb, label: str, pending_id: str, *, option: int | None = None, style: str = ""
) -> JsonDict:
    """A button whose value :func:`~loopengine.channels.slack.values.parse_value` reads back."""
    made: JsonDict = {
        "type": "button",
        "action_id": verb if option is None else f"{verb}_{option}",
        "text": plain(label, BUTTON_LABEL_LIMIT),
        "value": button_value(verb, pending_id, option),
    }
    if style:
        made["style"] = style
    return made


def _footer(pending_id: str, extra: str = "") -> JsonDict:
    note = f"{extra}pendingId `{escape(pending_id)}`"
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(note, SECTION_LIMIT)}]}


def approval_blocks(pending_id: str, tool: str, args: JsonDict, reason: str) -> list[JsonDict]:
    """The Block Kit message asking to approve one call, with Approve and Deny buttons."""
    shown = json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    code = clip(escape(shown).replace("```", "`\u200b``"), SECTION_LIMIT - 8)
    headline = f"*Approval needed:* `{escape(tool)}`"
    if reason:
        headline += f"\n{escape(reason)}"
    buttons = [
        button(APPROVE, "Approve", pending_id, style="primary"),
        button(DENY, "Deny", pending_id, style="danger"),
    ]
    return [
        section(headline),
        section(f"```{code}```"),
        {"type": "actions", "block_id": f"loopengine:{pending_id}", "elements": buttons},
        _footer(pending_id),
    ]


def buttonable(options: list[str] | None) -> bool:
    """Whether a question's options get a button each (at most :data:`MAX_OPTIONS`, none blank)."""
    return bool(options) and len(options or []) <= MAX_OPTIONS and all(o.strip() for o in options or [])


def question_blocks(
    pending_id: str, question: str, options: list[str] | None, resolve_url: str | None
) -> list[JsonDict]:
    """The Block Kit message for a pending ``system_ask_user`` question.

    One button per option (its value names the option's number, never its text), then
    "Type an answer", which opens :func:`answer_modal`. Options that cannot be buttons (too many, or
    blank ones) are listed instead. The footer says the API's route answers too.
    """
    blocks: list[JsonDict] = [section(f"*Question:* {escape(question)}")]
    elements: list[JsonDict] = []
    if options and buttonable(options):
        elements = [button(ANSWER, o, pending_id, option=i) for i, o in enumerate(options)]
    elif options:
        blocks.append(section("*Options:*\n" + "\n".join(f"• {escape(o)}" for o in options)))
    elements.append(button(TEXT, TYPE_AN_ANSWER, pending_id))
    blocks.append({"type": "actions", "block_id": f"loopengine:{pending_id}", "elements": elements})
    where = f'Or POST `{{"answer": "..."}}` to `{escape(resolve_url)}`. ' if resolve_url else ""
    blocks.append(_footer(pending_id, where))
    return blocks


def answer_modal(pending_id: str, question: str, response_url: str | None) -> JsonDict:
    """The modal "Type an answer" opens: the question and a text input (see the module docstring)."""
    metadata: JsonDict = {"pendingId": pending_id}
    if response_url and len(response_url) < METADATA_LIMIT - 200:
        metadata["responseUrl"] = response_url
    text_input = {
        "type": "plain_text_input",
        "action_id": ANSWER_ACTION,
        "multiline": True,
        "max_length": ANSWER_LIMIT,
    }
    return {
        "type": "modal",
        "callback_id": MODAL_CALLBACK,
        "private_metadata": json.dumps(metadata, separators=(",", ":")),
        "title": plain("Answer", 24),
        "submit": plain("Send", 24),
        "close": plain("Cancel", 24),
        "blocks": [
            section(f"*Question:* {escape(question)}"),
            {"type": "input", "block_id": ANSWER_BLOCK, "label": plain("Your answer"), "element": text_input},
        ],
    }


def notice_view(text: str) -> JsonDict:
    """A ``view_submission`` reply that turns the modal into a notice (``text`` is mrkdwn, escaped)."""
    title, close = plain("Answer", 24), plain("Close", 24)
    view = {"type": "modal", "title": title, "close": close, "blocks": [section(text)]}
    return {"response_action": "update", "view": view}


def submission_errors(text: str) -> JsonDict:
    """A ``view_submission`` reply that keeps the modal open with ``text`` under the input."""
    return {"response_action": "errors", "errors": {ANSWER_BLOCK: clip(text, 150)}}


def replace_message(text: str) -> JsonDict:
    """A reply that replaces the original message (its buttons go away) with ``text``."""
    return {"replace_original": True, "text": text}


def ephemeral_message(text: str) -> JsonDict:
    """A reply only the clicker sees; the original message and its buttons stay."""
    return {"response_type": "ephemeral", "replace_original": False, "text": text}


def answered_text(user_id: str, answer: str) -> str:
    """The message once a Slack user answered: who, and what (quoted, escaped, clipped)."""
    quoted = "\n".join(f"> {row}" for row in escape(answer).splitlines() or [""])
    return clip(f"Answered by {mention(user_id)}\n{quoted}", SECTION_LIMIT)


def mention(user_id: str) -> str:
    """``<@U123>`` for a Slack user id (Slack renders the name); the id escaped otherwise."""
    return f"<@{user_id}>" if user_id.isalnum() else escape(user_id)


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
    """``<@U123>`` for a Slack user, the identity as text with its channel otherwise.

    A Slack decider is ``slack:U123``; records written before identities were typed hold ``U123``.
    """
    if channel == "slack" and identity.removeprefix("slack:").isalnum():
        return mention(identity.removeprefix("slack:"))
    via = f" via {channel}" if channel else ""
    return f"{escape(identity)}{via}"
