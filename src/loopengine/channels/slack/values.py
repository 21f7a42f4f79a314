"""The values of loopengine's Slack buttons: what a click asks for, written by the sender, read back.

Each button's ``value`` says everything the click means; ``action_id`` only keeps a message's
buttons apart, as Slack requires:

* ``approve:<pendingId>`` / ``deny:<pendingId>``: decide an approval;
* ``answer:<pendingId>:<n>``: answer a question with its option number ``n`` (from 0). The answer
  is the option's text *as the pending item holds it*, read by the route from the checkpoint;
  nothing of the answer travels in the button, so no payload can answer with text of its own;
* ``text:<pendingId>``: open a modal to type an answer (``views.open``).

Standard library only (plus loopengine's error tree).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from loopengine.channels.base import BUTTON_PENDING_ID, check_button
from loopengine.domain.base.errors import InvalidInput

Verb = Literal["approve", "deny", "answer", "text"]
APPROVE: Verb = "approve"
DENY: Verb = "deny"
ANSWER: Verb = "answer"
TEXT: Verb = "text"
VERBS: tuple[Verb, ...] = (APPROVE, DENY, ANSWER, TEXT)
MAX_OPTIONS = 20
"""A question with more options than this lists them instead of offering a button for each."""

PENDING_ID = BUTTON_PENDING_ID
_OPTION = re.compile(r"0|[1-9][0-9]?")


@dataclass(frozen=True)
class ButtonValue:
    """What one button asks for."""

    verb: Verb
    pending_id: str
    option: int | None = None


def button_value(verb: Verb, pending_id: str, option: int | None = None) -> str:
    """The ``value`` of a button (see the module docstring); ValueError for a bad verb, id or option."""
    mismatch = "an answer button names an option; the others name none"
    check_button("verb", verb, VERBS, pending_id, option is not None, mismatch)
    if option is not None:
        if not 0 <= option < MAX_OPTIONS:
            raise ValueError(f"option must be 0-{MAX_OPTIONS - 1}")
        return f"{verb}:{pending_id}:{option}"
    return f"{verb}:{pending_id}"


def parse_value(value: Any) -> ButtonValue:
    """Read a value :func:`button_value` made; InvalidInput saying what is wrong otherwise."""
    if not isinstance(value, str):
        raise InvalidInput("the button value must be a string")
    verb, sep, rest = value.partition(":")
    if not sep or verb not in VERBS:
        raise InvalidInput(
            "the button value must be 'approve:<pendingId>', 'deny:<pendingId>', "
            "'answer:<pendingId>:<n>' or 'text:<pendingId>'"
        )
    option: int | None = None
    if verb == ANSWER:
        rest, sep, number = rest.rpartition(":")
        if not sep or not _OPTION.fullmatch(number) or int(number) >= MAX_OPTIONS:
            raise InvalidInput("an answer button's value must end in ':<option number>'")
        option = int(number)
    if not PENDING_ID.fullmatch(rest):
        raise InvalidInput("the button value names no valid pendingId")
    return ButtonValue(_verb(verb), rest, option)


def _verb(text: str) -> Verb:
    return next(v for v in VERBS if v == text)
