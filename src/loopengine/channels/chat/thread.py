"""What the conversation page shows, as plain records: the thread of a session, entry by entry.

Built from the session's durable history (its messages), its turns (each names where in the history
it starts, ``start_seq``) and their audit events (which calls waited for a human, and what became of
them), never from the stores. One :class:`Entry` per thing a reader sees, in the history's order:

- ``user`` / ``assistant``: a message's text;
- ``card``: a call that waited for a human (an approval or a question), where the model made it: open
  (a :class:`~loopengine.channels.inbox.cards.Card` with the magic-link form's controls) or closed,
  saying what became of it (approved / denied / answered by whom, expired, or not decided because the
  turn ended);
- ``outcome``: a call that ran, with its outcome (``ok``, ``error``, ``unknown``) and its arguments
  and result;
- ``note``: how a turn ended when that was not the model's own last word (cancelled, denied, ...).

The page's script draws the same kinds of entry from a turn's events while it watches, and takes
this server-side thread again whenever the turn pauses or finishes (so live and reloaded agree).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from loopengine.authoring.tools import Tool, args_hash
from loopengine.channels.inbox.cards import Card
from loopengine.channels.magic import form as forms
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus

EntryKind = Literal["user", "assistant", "card", "outcome", "note"]
MAX_DETAIL_CHARS = 4000
"""An outcome's arguments and result are shown up to this many characters each."""
PENDING = ("approval:pending", "question:pending")
VERBS = {"approve": "Approved", "deny": "Denied", "answer": "Answered"}
ENDINGS: Mapping[str, str] = {
    StopReason.DENIED: "The turn ended: a call was denied, so nothing after it ran.",
    StopReason.CANCELLED: "Stopped: nothing further ran. What had already run stays done.",
    StopReason.SUPERSEDED: "Superseded: a new message came before anyone answered.",
    StopReason.EXPIRED: "The turn ended: nobody answered in time.",
    StopReason.MAX_ITERATIONS: "The turn ended: it reached its step limit.",
    StopReason.ERROR: "The turn ended with an error.",
}
"""What a note says about a turn that ended other than by the model's own last word."""
UNDECIDED: Mapping[str, str] = {
    StopReason.CANCELLED: "Not decided: the turn was stopped first. This call did not run.",
    StopReason.SUPERSEDED: "Not decided: a new message came first. This call did not run.",
    StopReason.DENIED: "Skipped: another call of the same request was denied. This call did not run.",
}


@dataclass(frozen=True, slots=True)
class FieldMeta:
    """What the page's script needs to read one argument control back into a value.

    The magic-link form's rules (:func:`loopengine.channels.magic.form.edits`): ``kind`` and
    ``nullable`` as :class:`~loopengine.channels.magic.form.Field` has them; ``json_options``: an enum's
    option texts are JSON (not all of its members are strings).
    """

    name: str
    control: str
    kind: str
    nullable: bool
    json_options: bool


@dataclass(frozen=True, slots=True)
class OpenCard:
    """An open item's card (the inbox's, controls and all) and its controls' types for the script."""

    card: Card
    fields: tuple[FieldMeta, ...] = ()
    args_json: str = "{}"


def open_card(card: Card, tool: Tool | None, args: JsonDict) -> OpenCard:
    """``card`` with the types of its argument controls (as the magic-link form reads them)."""
    metas = []
    for declared in forms.fields(tool) or []:
        f = forms.shown(declared, args)
        nullable = f.nullable or (f.kind == "enum" and None in f.options)
        json_options = f.kind == "enum" and not all(isinstance(o, str) for o in f.options)
        metas.append(FieldMeta(f.name, f.control, f.kind, nullable, json_options))
    return OpenCard(card, tuple(metas), json.dumps(args, ensure_ascii=False, sort_keys=True))


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing the thread shows (see the module's docstring for the kinds)."""

    kind: EntryKind
    text: str = ""
    tool: str = ""
    outcome: str = ""
    args_json: str = ""
    result: str = ""
    pending_id: str = ""
    item_kind: str = ""
    state: str = ""
    card: OpenCard | None = None

    @property
    def role(self) -> str:
        """The entry's ``data-role``: ``user``, ``assistant`` or ``tool`` (a note has none)."""
        if self.kind in ("user", "assistant"):
            return self.kind
        return "tool" if self.kind in ("card", "outcome") else ""


@dataclass(frozen=True, slots=True)
class TurnRead:
    """A turn of the session and its audit events (``None``: not read, an older turn)."""

    turn: TurnRecord
    events: Sequence[JsonDict] | None = None


@dataclass(frozen=True, slots=True)
class Thread:
    """The session as the page shows it, and the turn still going (if any) with its events cursor."""

    entries: tuple[Entry, ...]
    turn_id: str | None = None
    turn_status: str = ""
    cursor: int = 0
    open_ids: tuple[str, ...] = field(default_factory=tuple)


def pretty(value: Any) -> str:
    """A JSON value as indented text, cut at :data:`MAX_DETAIL_CHARS`."""
    text = (
        value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    )
    return text if len(text) <= MAX_DETAIL_CHARS else text[:MAX_DETAIL_CHARS] + " …"


def outcome_of(result: ToolResultBlock | None) -> str:
    """A tool_result's outcome word: ``ok``, or the status an error result names."""
    if result is None:
        return "running"
    if not result.is_error:
        return "ok"
    try:
        body = json.loads(result.content)
    except ValueError:
        return "error"
    status = body.get("status") if isinstance(body, dict) else None
    return str(status) if isinstance(status, str) and status else "error"


def open_pending(turn: TurnRead) -> list[str]:
    """The pendingIds a paused turn's events leave undecided (the page reads each item to be sure)."""
    if turn.turn.status is not TurnStatus.PAUSED or turn.events is None:
        return []
    closed = {str(e.get("pendingId")) for e in turn.events if e.get("type") in ("decided", "expired")}
    asked = [str(e.get("pendingId")) for e in turn.events if e.get("type") in PENDING]
    return [p for p in asked if p not in closed]


@dataclass
class _Asks:
    """The pending items of one turn, by argsHash in the order they were asked, and their fates."""

    by_hash: dict[str, list[JsonDict]] = field(default_factory=dict)
    closed: dict[str, JsonDict] = field(default_factory=dict)

    @staticmethod
    def of(events: Sequence[JsonDict] | None) -> _Asks:
        asks = _Asks()
        for event in events or ():
            kind = event.get("type")
            if kind in PENDING:
                asks.by_hash.setdefault(str(event.get("argsHash")), []).append(event)
            elif kind in ("decided", "expired"):
                asks.closed[str(event.get("pendingId"))] = event
        return asks

    def take(self, use: ToolUseBlock) -> JsonDict | None:
        """The pending event of this call (the first one of its tool and arguments not taken yet)."""
        found = self.by_hash.get(args_hash(use.name, use.input))
        return found.pop(0) if found else None


def _closed_text(event: JsonDict | None, turn: TurnRecord, answer: str | None) -> tuple[str, str]:
    """(state, words) for a card that is no longer open."""
    if event is not None and event.get("type") == "expired":
        return "expired", "Expired: nobody answered in time. This call did not run."
    if event is not None:
        decision = str(event.get("decision"))
        by = str(event.get("decidedBy") or "someone")
        words = f"{VERBS.get(decision, decision.capitalize())} by {by}"
        if decision == "approve" and event.get("edited"):
            words += ", with edits"
        if decision == "answer" and answer is not None:
            words += f": {answer}"
        comment = event.get("comment")
        if isinstance(comment, str) and comment:
            words += f" (“{comment}”)"
        return {"approve": "approved", "deny": "denied", "answer": "answered"}.get(decision, "closed"), words
    stop = turn.stop_reason or turn.stop_requested
    if stop is not None and stop in UNDECIDED:
        return "closed", UNDECIDED[stop]
    return "closed", "Closed without a decision. This call did not run."


class _Builder:
    def __init__(
        self, messages: Sequence[Message], turns: Sequence[TurnRead], cards: Mapping[str, OpenCard]
    ) -> None:
        self.messages, self.cards = messages, cards
        self.turns = sorted(turns, key=lambda t: t.turn.start_seq)
        self.results = {r.tool_use_id: r for m in messages for r in m.tool_results}
        self.entries: list[Entry] = []

    def turn_at(self, index: int) -> tuple[int, TurnRead | None]:
        found: tuple[int, TurnRead | None] = (-1, None)
        for n, read in enumerate(self.turns):
            if read.turn.start_seq <= index:
                found = (n, read)
        return found

    def build(self) -> list[Entry]:
        asks: dict[int, _Asks] = {}
        current = -1
        for index, message in enumerate(self.messages):
            n, read = self.turn_at(index)
            if n != current:
                self.end(current)
                current = n
            if read is not None and n not in asks:
                asks[n] = _Asks.of(read.events)
            said: list[str] = []
            for block in message.content:
                if isinstance(block, TextBlock):
                    said.append(block.text)
                    continue
                self.say(message.role, said)
                if isinstance(block, ToolUseBlock):
                    self.call(block, read, asks.get(n))
            self.say(message.role, said)
        self.end(current)
        return self.entries

    def say(self, role: str, said: list[str]) -> None:
        """A ``user`` or ``assistant`` entry for the text blocks in ``said`` (then emptied)."""
        text = "".join(said)
        said.clear()
        if text.strip():
            self.entries.append(Entry("user" if role == "user" else "assistant", text=text))

    def end(self, n: int) -> None:
        """A note for turn ``n`` when it ended other than by the model's own last word."""
        if n < 0:
            return
        turn, stop = self.turns[n].turn, self.turns[n].turn.stop_reason
        if turn.status is TurnStatus.FINISHED and stop is not None and stop in ENDINGS:
            self.entries.append(Entry("note", text=ENDINGS[stop], state=stop.value))

    def call(self, use: ToolUseBlock, read: TurnRead | None, asks: _Asks | None) -> None:
        result = self.results.get(use.id)
        asked = asks.take(use) if asks is not None else None
        ran = asked is None
        if asked is not None and read is not None:
            pending_id = str(asked.get("pendingId"))
            kind = str(asked.get("kind") or "approval")
            question = asked.get("question")
            card = self.cards.get(pending_id)
            common: dict[str, Any] = {
                "tool": use.name,
                "pending_id": pending_id,
                "item_kind": kind,
                "args_json": pretty(use.input),
                "text": question if isinstance(question, str) else "",
            }
            if card is not None:
                self.entries.append(Entry("card", state="open", card=card, **common))
                return
            closing = asks.closed.get(pending_id) if asks is not None else None
            answer = result.content if kind == "question" and result is not None else None
            state, words = _closed_text(closing, read.turn, answer)
            self.entries.append(Entry("card", state=state, outcome=words, **common))
            ran = state == "approved"
        if ran and result is not None:
            self.entries.append(
                Entry(
                    "outcome",
                    tool=use.name,
                    outcome=outcome_of(result),
                    args_json=pretty(use.input),
                    result=pretty(_maybe_json(result.content)),
                )
            )


def _maybe_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def build(messages: Sequence[Message], turns: Sequence[TurnRead], cards: Mapping[str, OpenCard]) -> Thread:
    """The thread of a session: ``messages`` (its history), ``turns`` (with the events read), open ``cards``.

    The turn still going (the last one, unless it finished) is the one the page's script follows,
    from the cursor after its last event read here.
    """
    entries = _Builder(messages, turns, cards).build()
    last = max(turns, key=lambda t: t.turn.start_seq, default=None)
    if last is None or last.turn.status is TurnStatus.FINISHED:
        return Thread(tuple(entries))
    cursor = len(last.events) if last.events is not None else 0
    return Thread(
        tuple(entries),
        turn_id=last.turn.turn_id,
        turn_status=last.turn.status.public(),
        cursor=cursor,
        open_ids=tuple(cards),
    )
