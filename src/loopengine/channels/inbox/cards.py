"""What the inbox page shows, as plain records: one :class:`Card` per open item, grouped, and the flash.

Built from :class:`loopengine.app.request.items.ItemView` (the item, its turn's checkpoint, its tool as the
turn's config snapshot describes it, and its fate), never from the stores. The argument controls are
the magic-link form's (:mod:`loopengine.channels.magic.form`): the same fields from the tool's JSON
Schema, the same texts, read back by the same :func:`~loopengine.channels.magic.form.edits`. What
became of an item is worded by the same :func:`~loopengine.channels.magic.form.closed_state`.

The templates (``templates/*.html``) only place these values; every one of them is escaped there.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loopengine.app.request.items import ItemView
from loopengine.authoring.tools import Tool
from loopengine.channels.magic import form as forms
from loopengine.domain.checkpoint import takes_free_text
from loopengine.domain.decisions import Approve
from loopengine.domain.fate import FateState
from loopengine.domain.principals import Principal

CHANNEL = "inbox"
"""The channel the audit trail records for a decision made here."""
MULTILINE_AFTER = 80
DEFAULT_TENANT = "the default tenant"


def age(seconds: float) -> str:
    """A waiting time in words: ``under a minute``, ``5 min``, ``3 h 10 min``, ``2 d 4 h``."""
    minutes = int(max(0.0, seconds) // 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def tenant_label(tenant: str) -> str:
    """A tenant as the page names it (the default tenant ``""`` has no name of its own)."""
    return tenant or DEFAULT_TENANT


def pretty(value: Any) -> str:
    """A JSON value as indented text."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


# --- argument controls ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """One argument's label and form control, with the text it holds."""

    id: str
    name: str
    label: str
    required: bool
    hint: str
    widget: str  # select | number | text | textarea
    value: str
    step: str = "any"
    choices: tuple[tuple[str, bool], ...] = ()
    rows: int = 3
    json: bool = False

    @property
    def unset(self) -> bool:
        """A select whose value is none of its choices (shown as "(not set)")."""
        return self.widget == "select" and not any(selected for _choice, selected in self.choices)


def _control(field_: forms.Field, text: str, pending_id: str) -> Control:
    control_id = f"f-{pending_id}-" + re.sub(r"[^A-Za-z0-9_-]", "_", field_.name)
    base = Control(control_id, field_.control, field_.name, field_.required, field_.description, "text", text)
    if field_.kind in ("enum", "boolean"):
        options = field_.options if field_.kind == "enum" else (True, False)
        texts = [field_.option_text(o) if field_.kind == "enum" else json.dumps(o) for o in options]
        return dataclasses.replace(base, widget="select", choices=tuple((t, t == text) for t in texts))
    if field_.kind in ("number", "integer"):
        return dataclasses.replace(base, widget="number", step="1" if field_.kind == "integer" else "any")
    if field_.kind == "string" and "\n" not in text and "\r" not in text and len(text) <= MULTILINE_AFTER:
        return base
    rows = min(16, max(3, text.count("\n") + 2))
    return dataclasses.replace(base, widget="textarea", rows=rows, json=field_.kind == "json")


def controls(
    tool: Tool | None, args: dict[str, Any], values: Mapping[str, str], pending_id: str
) -> tuple[Control, ...] | None:
    """A control per top-level argument the tool's schema declares; None when it declares none."""
    declared = forms.fields(tool)
    if declared is None:
        return None
    return tuple(_control(forms.shown(f, args), values.get(f.control, ""), pending_id) for f in declared)


# --- cards ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """What a refused post sent, to show again with why it was refused."""

    error: str
    values: Mapping[str, str] = field(default_factory=dict)
    comment: str = ""
    answer: str = ""


@dataclass(frozen=True)
class Card:
    """One open item as the page shows it."""

    pending_id: str
    kind: str
    tool: str
    tool_description: str
    agent: str
    tenant: str
    turn_id: str
    reason: str
    args_json: str
    created_at: float
    age: str
    since: str
    decide_by: str | None
    deciders: str
    may_decide: bool
    token: str
    args_hash: str
    controls: tuple[Control, ...] | None = None
    other_args_json: str | None = None
    question: str = ""
    options: tuple[str, ...] = ()
    free_text: bool = True
    attempt: Attempt | None = None
    server: str | None = None
    """The MCP server the tool belongs to (None for the agent's own tools)."""
    server_tool: str | None = None
    """The server's own name for the tool (``charge`` for ``billing_charge``)."""

    @property
    def tenant_label(self) -> str:
        return tenant_label(self.tenant)


def deciders(approvers: Sequence[str], tenant: str) -> str:
    """Who may decide an item: its rule's approvers, or anyone who can see its tenant."""
    if approvers:
        return ", ".join(approvers)
    return f"anyone with access to {tenant_label(tenant)}"


def card(
    view: ItemView, who: Principal, now: float, token: str, attempt: Attempt | None = None
) -> Card | None:
    """The card for an open item (None when it is not open any more)."""
    item, cp = view.item, view.checkpoint
    if item is None or cp is None:
        return None
    tool = view.tool
    question = item.args.get("question")
    options = item.args.get("options")
    values = forms.initial_values(tool, item.args)
    if attempt is not None:
        values = {**values, **attempt.values}
    declared = {f.name for f in forms.fields(tool) or []}
    others = {k: v for k, v in item.args.items() if k not in declared}
    return Card(
        pending_id=item.pending_id,
        kind=item.kind,
        tool=item.tool,
        tool_description=(tool.description if tool is not None else "") or "",
        agent=cp.agent,
        tenant=cp.tenant,
        turn_id=cp.turn_id,
        reason=item.reason,
        args_json=pretty(item.args),
        created_at=cp.created_at,
        age=age(now - cp.created_at),
        since=forms.when(cp.created_at),
        decide_by=forms.when(item.expires_at) if item.expires_at is not None else None,
        deciders=deciders(item.approvers, cp.tenant),
        may_decide=who.may_approve(item.approvers),
        token=token,
        args_hash=item.args_hash,
        controls=controls(tool, item.args, values, item.pending_id) if item.kind == "approval" else None,
        other_args_json=pretty(others) if declared and others else None,
        question=question if isinstance(question, str) else item.reason,
        options=tuple(str(o) for o in options) if isinstance(options, list) else (),
        free_text=takes_free_text(item),
        attempt=attempt,
        server=view.mcp.server if view.mcp is not None else None,
        server_tool=view.mcp.tool if view.mcp is not None else None,
    )


@dataclass(frozen=True)
class Group:
    """The open items of one agent in one tenant, oldest first."""

    tenant: str
    agent: str
    cards: tuple[Card, ...]
    oldest: str
    newest: str

    @property
    def tenant_label(self) -> str:
        return tenant_label(self.tenant)


def groups(cards: Sequence[Card], now: float) -> list[Group]:
    """``cards`` grouped by (tenant, agent) in that order, each group oldest item first."""
    keyed: dict[tuple[str, str], list[Card]] = {}
    for c in cards:
        keyed.setdefault((c.tenant, c.agent), []).append(c)
    out = []
    for (tenant, agent), members in sorted(keyed.items()):
        members.sort(key=lambda c: (c.created_at, c.pending_id))
        oldest, newest = age(now - members[0].created_at), age(now - members[-1].created_at)
        out.append(Group(tenant, agent, tuple(members), oldest, newest))
    return out


# --- the flash: what became of the item a post was about ------------------------------------------


@dataclass(frozen=True)
class Flash:
    """A line at the top of the page about one item that is no longer open."""

    pending_id: str
    state: str
    text: str
    css: str = "note"


_DONE = {FateState.APPROVED: "approved", FateState.DENIED: "denied", FateState.ANSWERED: "answered"}


def flash(view: ItemView, who: Principal) -> Flash | None:
    """What became of ``view``'s item, from its fate; None while it is still open.

    A decision this caller just made here reads "You approved <tool>"; anything else (someone else's
    decision, a supersede, an expiry) is worded by ``closed_state``, naming who decided and when.
    """
    fate = view.fate
    if fate.open:
        return None
    decision = fate.decision
    mine = decision is not None and decision.decided_by == who.identity and decision.channel == CHANNEL
    if decision is not None and mine and fate.state in _DONE and fate.by_a_person:
        edited = isinstance(decision, Approve) and decision.edited_args is not None
        tail = " with your edits" if edited else ""
        text = f"You {_DONE[fate.state]} {decision.tool}{tail} ({forms.when(decision.at)})."
        return Flash(view.pending_id, fate.state.value, text, "ok")
    state = forms.closed_state(fate)
    return Flash(view.pending_id, state.state, state.text)
