"""Lark cards: what a notification looks like, its buttons, and the card a click leaves behind.

Cards use Lark's message-card JSON 1.0 (``config`` / ``header`` / ``elements`` with ``div``,
``action``, ``button`` and ``note`` tags); both senders (the custom bot's webhook,
:mod:`loopengine.channels.lark.send`, and the app's bot, :mod:`loopengine.channels.lark.app`)
post what :class:`CardMaker` builds, and the interaction callback
(:mod:`loopengine.channels.lark.routes`) answers with :func:`fate_card`.

**Two kinds of button.**

* *Link buttons* (``url``) open a page: the magic-link page where one item is reviewed and
  decided, or, without magic links, the resolve route (which decides only on a ``POST`` with the
  API's credentials, so the card says so). Any card can carry them.
* *Callback buttons* (``value``), with ``callback: true``: a click is sent by Lark to
  ``POST /integrations/lark/interactions`` as a ``card.action.trigger`` callback
  (:mod:`loopengine.channels.lark.receive`) and decides there, recorded as ``lark:<open_id>``.
  The value is a JSON object (:func:`button_value`): ``{"decision": "approve" | "deny",
  "pendingId"}`` for an approval, ``{"decision": "answer", "pendingId", "answer": <option>}`` for
  one option of a question (one button per option; the answer is the option's text). A free-text
  answer cannot travel in a button, so questions keep their link button. Lark delivers callbacks
  only for cards its *app* sent: a custom bot's cards support link buttons only, so ``callback``
  needs the app sender.

Callback cards set ``config.update_multi`` (a *shared* card): the card the callback answers with
replaces the card for everyone in the chat, not only for the person who clicked.

Everything the model wrote (arguments, reason, question, options, final text) goes into
``plain_text`` elements, never ``lark_md``, so it cannot mention people (``<at ...>``) or add links.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from loopengine.channels.base import BUTTON_PENDING_ID, check_button, clip, text_of
from loopengine.channels.magic import token as magic
from loopengine.domain.base.clock import Clock
from loopengine.domain.base.errors import ConfigError, InvalidInput
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.fate import Fate, FateState

Verdict = Literal["approve", "deny", "answer"]

APPROVE: Verdict = "approve"
DENY: Verdict = "deny"
ANSWER: Verdict = "answer"
VERDICTS: tuple[Verdict, ...] = (APPROVE, DENY, ANSWER)
DECISION_KEY, PENDING_KEY, ANSWER_KEY = "decision", "pendingId", "answer"

DEFAULT_LINK_TTL = 7 * 24 * 3600
TEXT_LIMIT = 4000
"""Characters per card text element (Lark limits a whole card to about 30 KB)."""
LABEL_LIMIT = 60
"""Characters of an option shown on its button (the value carries the whole text)."""
MAX_OPTION_BUTTONS = 10
"""A question with more options than this gets no option buttons (its link button stays)."""
ANSWER_LIMIT = 2000
"""An option longer than this is not offered as a button (it could not be shown or sent well)."""


# -- the button values ------------------------------------------------------------------------


def button_value(decision: Verdict, pending_id: str, answer: str | None = None) -> JsonDict:
    """The ``value`` of a callback button; ValueError for a bad decision, id or answer."""
    mismatch = "an answer button carries an answer; approve and deny buttons carry none"
    check_button("decision", decision, VERDICTS, pending_id, answer is not None, mismatch)
    value: JsonDict = {DECISION_KEY: decision, PENDING_KEY: pending_id}
    if answer is not None:
        value[ANSWER_KEY] = answer
    return value


def parse_button_value(value: Any) -> tuple[Verdict, str, str | None]:
    """``(decision, pendingId, answer)`` from a value :func:`button_value` made; InvalidInput otherwise."""
    if not isinstance(value, dict):
        raise InvalidInput("the Lark button value must be a JSON object")
    decision = value.get(DECISION_KEY)
    if decision not in VERDICTS:
        raise InvalidInput("the Lark button value's decision must be 'approve', 'deny' or 'answer'")
    pending_id = value.get(PENDING_KEY)
    if not isinstance(pending_id, str) or not BUTTON_PENDING_ID.fullmatch(pending_id):
        raise InvalidInput("the Lark button value names no valid pendingId")
    answer = value.get(ANSWER_KEY)
    if decision == ANSWER:
        if not isinstance(answer, str) or not answer.strip() or len(answer) > ANSWER_LIMIT:
            raise InvalidInput(f"an answer button needs an answer of 1-{ANSWER_LIMIT} characters")
        return ANSWER, pending_id, answer
    if answer is not None:
        raise InvalidInput("an approve or deny button carries no answer")
    return (APPROVE if decision == APPROVE else DENY), pending_id, None


# -- card elements ----------------------------------------------------------------------------


def plain(text: str, limit: int = TEXT_LIMIT) -> JsonDict:
    """A ``plain_text`` element (never ``lark_md``: no mentions, no links)."""
    return {"tag": "plain_text", "content": clip(text, limit)}


def div(text: str) -> JsonDict:
    """A block of text."""
    return {"tag": "div", "text": plain(text)}


def note(text: str) -> JsonDict:
    """Small print at the bottom of a card."""
    return {"tag": "note", "elements": [plain(text)]}


def link_button(label: str, url: str, kind: str) -> JsonDict:
    """A button that opens ``url``."""
    return {"tag": "button", "text": plain(label, LABEL_LIMIT + 1), "type": kind, "url": url}


def callback_button(label: str, value: JsonDict, kind: str) -> JsonDict:
    """A button whose click Lark sends to the interaction callback with ``value``."""
    return {"tag": "button", "text": plain(label, LABEL_LIMIT + 1), "type": kind, "value": value}


def card(title: str, template: str, elements: list[JsonDict], *, shared: bool = False) -> JsonDict:
    """A whole card; ``shared`` (``update_multi``): a callback's answer replaces it for everyone."""
    config: JsonDict = {"wide_screen_mode": True}
    if shared:
        config["update_multi"] = True
    return {
        "config": config,
        "header": {"template": template, "title": plain(title, 200)},
        "elements": elements,
    }


# -- notification cards -----------------------------------------------------------------------


@dataclass(frozen=True)
class CardMaker:
    """Builds the card for each notification, with link buttons and (``callback``) callback buttons.

    With ``magic_secret`` and ``magic_recipient``, link buttons open a magic-link page valid for
    ``link_ttl`` seconds from ``clock`` time, decided as ``magic_recipient``; otherwise they open
    the payload's ``resolveUrl``. Half a magic-link setup or a lifetime that is not positive is a
    :class:`~loopengine.domain.base.errors.ConfigError`.
    """

    clock: Clock = field(repr=False)
    magic_secret: str | None = field(default=None, repr=False)
    magic_recipient: str | None = None
    link_ttl: float = DEFAULT_LINK_TTL
    callback: bool = False

    def __post_init__(self) -> None:
        """ConfigError unless both halves of a magic-link setup or neither, and a positive lifetime."""
        magic_secret, magic_recipient = self.magic_secret, self.magic_recipient
        if (magic_secret is None) != (magic_recipient is None) or magic_secret == "" or magic_recipient == "":
            raise ConfigError("notifier lark: magic links need both a secret and a recipient")
        if self.link_ttl <= 0:
            raise ConfigError("notifier lark: magic_link_ttl_seconds must be positive")

    def link(self, payload: Mapping[str, Any]) -> tuple[str | None, str]:
        """Where the link buttons go, and the note that says what they do."""
        page = self.page(payload)
        if page is not None:
            return page, "The buttons open a page to review and decide."
        resolve_url = text_of(payload.get("resolveUrl"))
        if resolve_url:
            return resolve_url, (
                "The buttons open the resolve route; it decides only on a POST with the API's credentials."
            )
        return None, "Decide in the app."

    def page(self, payload: Mapping[str, Any]) -> str | None:
        """The item's magic-link page (``None`` without magic links or a usable ``resolveUrl``)."""
        pending_id = text_of(payload.get("pendingId"))
        resolve_url = text_of(payload.get("resolveUrl"))
        if self.magic_secret is None or self.magic_recipient is None or not pending_id:
            return None
        # resolveUrl is <public_url>/pending-{approvals,questions}/<id>/...: the magic page lives
        # under the same public URL
        for route in (f"/pending-approvals/{pending_id}/resolve", f"/pending-questions/{pending_id}/answer"):
            if resolve_url.endswith(route):
                expires = self.clock.now() + self.link_ttl
                token = magic.issue_token(self.magic_secret, pending_id, self.magic_recipient, expires)
                return magic.magic_url(resolve_url[: -len(route)], token)
        return None

    def card(self, event: str, payload: Mapping[str, Any]) -> JsonDict:
        """The card for one notification; ValueError for an unknown event or unusable payload."""
        agent = text_of(payload.get("agent")) or "?"
        if event == "approval":
            return self._approval(agent, payload)
        if event == "question":
            return self._question(agent, payload)
        turn = text_of(payload.get("turnId"))
        if event == "run_start":
            trigger = text_of(payload.get("trigger")) or "message"
            return card(f"Run started: {agent}", "grey", [note(f"Trigger {trigger}, turn {turn}")])
        if event == "run_finish":
            stop = text_of(payload.get("stopReason")) or "finished"
            elements = []
            final = text_of(payload.get("text")).strip()
            if final:
                elements.append(div(final))
            elements.append(note(f"Stop reason {stop}, turn {turn}"))
            return card(f"Run finished: {agent}", "green" if stop == "end_turn" else "red", elements)
        raise ValueError(f"unknown notification event {event!r}")

    def _approval(self, agent: str, payload: Mapping[str, Any]) -> JsonDict:
        pending_id = text_of(payload.get("pendingId"))
        tool = text_of(payload.get("tool"))
        args = payload.get("args")
        if not pending_id or not tool or not isinstance(args, dict):
            raise ValueError("an approval notification needs pendingId, tool and args")
        elements = []
        reason = text_of(payload.get("reason"))
        if reason:
            elements.append(div(reason))
        shown = json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False, default=str)
        elements.append(div(f"Arguments:\n{shown}"))
        buttons: list[JsonDict] = []
        if self.callback:
            buttons.append(callback_button("Approve", button_value(APPROVE, pending_id), "primary"))
            buttons.append(callback_button("Deny", button_value(DENY, pending_id), "danger"))
            page = self.page(payload)
            if page is not None:
                buttons.append(link_button("Review…", page, "default"))
            how = "Approve or Deny here" + (", or open the page to review first." if page else ".")
        else:
            url, how = self.link(payload)
            if url is not None:
                buttons = [link_button("Approve…", url, "primary"), link_button("Deny…", url, "danger")]
        if buttons:
            elements.append({"tag": "action", "actions": buttons})
        elements.append(note(f"{how} Agent {agent}, pendingId {pending_id}"))
        return card(f"Approval needed: {tool}", "orange", elements, shared=self.callback)

    def _question(self, agent: str, payload: Mapping[str, Any]) -> JsonDict:
        pending_id = text_of(payload.get("pendingId"))
        if not pending_id:
            raise ValueError("a question notification needs a pendingId")
        if self.callback:  # a free-text answer needs the page: the resolve route is no page
            url = self.page(payload)
            how = "Answer in your own words on the page." if url else "Answer in the app."
        else:
            url, how = self.link(payload)
        elements = [div(text_of(payload.get("question")))]
        raw = payload.get("options")
        options = [text_of(o) for o in raw] if isinstance(raw, list) else []
        buttons: list[JsonDict] = []
        if options and self.callback and _buttonable(options):
            for option in options:
                value = button_value(ANSWER, pending_id, option)
                buttons.append(callback_button(clip(option, LABEL_LIMIT), value, "default"))
            how = "Pick an option." + (" Or answer in your own words on the page." if url else "")
        elif options:
            elements.append(div("Options:\n" + "\n".join(f"• {o}" for o in options)))
        if url is not None:
            buttons.append(link_button("Answer…", url, "primary"))
        if buttons:
            elements.append({"tag": "action", "actions": buttons})
        elements.append(note(f"{how} Agent {agent}, pendingId {pending_id}"))
        return card(f"Question from {agent}", "blue", elements, shared=self.callback)


def _buttonable(options: list[str]) -> bool:
    """Whether every option can be a button (few enough, none blank or too long)."""
    fits = all(o.strip() and len(o) <= ANSWER_LIMIT for o in options)
    return len(options) <= MAX_OPTION_BUTTONS and fits


# -- what a click leaves behind ---------------------------------------------------------------

_DONE = {
    FateState.APPROVED: ("Approved", "green"),
    FateState.DENIED: ("Denied", "red"),
    FateState.ANSWERED: ("Answered", "green"),
}
_CLOSED = {
    FateState.SKIPPED: "Skipped: another call of the same request was denied",
    FateState.EXPIRED: "Expired: nobody answered in time",
    FateState.SUPERSEDED: "Superseded: the user moved on with a new message",
    FateState.CANCELLED: "Cancelled",
    FateState.ABANDONED: "Abandoned: the turn stopped waiting for it",
    FateState.OPEN: "Still open",
}
ALREADY_RESOLVED = "Already resolved"


def who_text(identity: str, channel: str | None) -> str:
    """The decider as the card shows it: ``lark:ou_…`` as it is, others with their channel."""
    if channel in (None, "lark") or identity.startswith(f"{channel}:"):
        return identity
    return f"{identity} via {channel}"


def fate_text(fate: Fate) -> str:
    """One line: what became of the item (and who decided it)."""
    decision = fate.decision
    if fate.state in _DONE and decision is not None:
        verb, _ = _DONE[fate.state]
        return f"{verb} by {who_text(decision.decided_by, decision.channel)}"
    return _CLOSED.get(fate.state, ALREADY_RESOLVED)


def fate_card(fate: Fate, pending_id: str) -> JsonDict:
    """The card that replaces a decided (or closed) item's card: its outcome, for everyone."""
    decision = fate.decision
    verb, template = _DONE.get(fate.state, ("", "grey"))
    tool = decision.tool if decision is not None else ""
    title = f"{verb}: {tool}" if verb and tool else (verb or fate_text(fate).split(":")[0])
    elements = [div(fate_text(fate))]
    answer = getattr(decision, "answer", None)
    if isinstance(answer, str) and answer:
        elements.append(div(f"Answer:\n{answer}"))
    elements.append(note(f"pendingId {pending_id}"))
    return card(title, template, elements, shared=True)
