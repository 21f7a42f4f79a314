"""Magic-link forms: a pending call's arguments as form fields and back, and what became of an item.

:func:`fields` turns a tool's ``input_schema`` into one control per top-level property (``string``,
``number``, ``integer``, ``boolean``, ``enum``/``const``, each maybe nullable through a ``type`` list
or a two-variant ``anyOf``/``oneOf`` with ``null``; a JSON textarea for anything else), and
:func:`shown` shows a value its control cannot hold as JSON. :func:`edits` reads the submitted texts
back into ``editedArgs``, only when something changed (JSON equality: ``1 == 1.0``, never
``True == 1``). :func:`closed_state` words what became of an item
(:func:`loopengine.domain.fate.item_fate`) for a page.

Standard library only (plus loopengine's records and error tree); callers pass ``now``.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from loopengine.authoring.tools import Tool
from loopengine.domain.base import errors
from loopengine.domain.base.jsonsafe import BadJson, parse_json
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.decisions import Abandoned, Decision
from loopengine.domain.fate import Fate, FateState

ARG_PREFIX = "arg."

FieldKind = Literal["string", "number", "integer", "boolean", "enum", "json"]
SIMPLE_TYPES: Mapping[str, FieldKind] = {
    "string": "string",
    "number": "number",
    "integer": "integer",
    "boolean": "boolean",
}


# --- fields ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One top-level argument as a form control."""

    name: str
    kind: FieldKind
    required: bool
    nullable: bool = False
    options: tuple[Any, ...] = ()
    description: str = ""

    @property
    def control(self) -> str:
        """The form control's name."""
        return ARG_PREFIX + self.name

    def option_text(self, value: Any) -> str:
        """How an enum member travels in the form (strings as they are when all members are strings)."""
        if isinstance(value, str) and all(isinstance(o, str) for o in self.options):
            return value
        return json.dumps(value, sort_keys=True)

    def fits(self, value: Any) -> bool:
        """Whether the current value can be shown in this control without changing it."""
        if value is None:
            return self.nullable or (self.kind == "enum" and None in self.options) or self.kind == "json"
        if self.kind == "string":
            return isinstance(value, str)
        if self.kind == "number":
            return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if self.kind == "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        if self.kind == "boolean":
            return isinstance(value, bool)
        if self.kind == "enum":
            return any(_same(value, o) for o in self.options)
        return True


def _classify(prop: Any) -> tuple[FieldKind, bool, tuple[Any, ...]]:
    """(kind, nullable, enum options) for one property schema; ``json`` when nothing simpler fits."""
    if not isinstance(prop, dict):
        return "json", False, ()
    if isinstance(prop.get("enum"), list) and prop["enum"]:
        return "enum", None in prop["enum"], tuple(prop["enum"])
    if "const" in prop:
        return "enum", prop["const"] is None, (prop["const"],)
    declared = prop.get("type")
    if isinstance(declared, str) and declared in SIMPLE_TYPES:
        return SIMPLE_TYPES[declared], False, ()
    if isinstance(declared, list):
        types = [t for t in declared if t != "null"]
        if len(types) == 1 and types[0] in SIMPLE_TYPES:
            return SIMPLE_TYPES[types[0]], "null" in declared, ()
        return "json", False, ()
    variants = prop.get("anyOf") or prop.get("oneOf")
    if declared is None and isinstance(variants, list) and len(variants) == 2:
        others = [v for v in variants if not (isinstance(v, dict) and v.get("type") == "null")]
        if len(others) == 1:
            kind, _nullable, options = _classify(others[0])
            if kind != "json":
                return kind, True, (*options, None) if options else ()
    return "json", False, ()


def fields(tool: Tool | None) -> list[Field] | None:
    """The editable top-level arguments of ``tool``; None when its schema lists no properties."""
    schema = tool.input_schema if tool is not None else None
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict) or not props:
        return None
    required = schema.get("required") if isinstance(schema, dict) else None
    wanted = set(required) if isinstance(required, list) else set()
    out = []
    for name, prop in props.items():
        kind, nullable, options = _classify(prop)
        description = prop.get("description", "") if isinstance(prop, dict) else ""
        field = Field(str(name), kind, name in wanted, nullable, options, str(description or ""))
        out.append(field)
    return out


def shown(field: Field, args: JsonDict) -> Field:
    """The field as it will be shown for these args: a value its control cannot hold becomes JSON."""
    if field.name in args and not field.fits(args[field.name]):
        return Field(field.name, "json", field.required, False, (), field.description)
    return field


def text_of(field: Field, args: JsonDict) -> str:
    """The control's initial text for the current value (empty when the argument is absent)."""
    if field.name not in args:
        return ""
    value = args[field.name]
    if field.kind == "json":
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    if value is None:
        return "" if field.kind != "enum" else field.option_text(None)
    if field.kind == "string":
        return str(value)
    if field.kind == "enum":
        return field.option_text(value)
    return json.dumps(value)  # numbers and booleans


def initial_values(tool: Tool | None, args: JsonDict) -> dict[str, str]:
    """Every control's initial text for these args, by control name."""
    return {f.control: text_of(shown(f, args), args) for f in fields(tool) or []}


def submitted_values(form: Mapping[str, str]) -> dict[str, str]:
    """The argument controls' texts in a submitted form, by control name."""
    return {k: v for k, v in form.items() if k.startswith(ARG_PREFIX)}


# --- edits ----------------------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    """JSON equality, with 1 == 1.0 but never True == 1."""
    number = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, number) and isinstance(b, number):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


_ABSENT = object()


def _coerce(field: Field, text: str, current: Any) -> Any:
    """The submitted text as a value of the field's type; ``_ABSENT`` leaves the argument out."""
    blank = text.strip() == ""
    if field.kind == "string":
        value = text if isinstance(current, str) and "\r" in current else text.replace("\r\n", "\n")
        if value == "" and current is _ABSENT:
            return _ABSENT
        if value == "" and field.nullable:
            return None
        return value
    if blank:
        if current is _ABSENT:
            return _ABSENT
        if field.nullable or (field.kind == "enum" and None in field.options):
            return None
        raise errors.InvalidInput(f"{field.name}: a value is required")
    if field.kind in ("number", "integer"):
        return _number(field, text.strip(), current)
    if field.kind == "boolean":
        if text in ("true", "false"):
            return text == "true"
        raise errors.InvalidInput(f"{field.name}: choose true or false")
    if field.kind == "enum":
        for option in field.options:
            if field.option_text(option) == text:
                return option
        raise errors.InvalidInput(f"{field.name}: choose one of the listed values")
    try:
        return parse_json(text, field.name)  # finite numbers, sane nesting, no lone surrogates
    except BadJson:
        raise errors.InvalidInput(f"{field.name}: not valid JSON") from None


def _number(field: Field, text: str, current: Any) -> Any:
    if field.kind == "integer":
        if not re.fullmatch(r"[+-]?\d{1,30}", text):
            raise errors.InvalidInput(f"{field.name}: enter a whole number")
        return int(text)
    try:
        value = float(text)
    except ValueError:
        raise errors.InvalidInput(f"{field.name}: enter a number") from None
    if not math.isfinite(value):
        raise errors.InvalidInput(f"{field.name}: enter a finite number")
    if value.is_integer() and isinstance(current, int) and not isinstance(current, bool):
        return int(value)
    return value


def edits(tool: Tool | None, args: JsonDict, form: Mapping[str, str]) -> JsonDict | None:
    """The edited args if any submitted field differs from the pending args, else None.

    A field missing from the form is unchanged; a blank field of an absent argument stays absent.
    Raises ``InvalidInput`` naming the fields whose text does not fit their type.
    """
    declared_fields = fields(tool)
    if declared_fields is None:
        return None
    edited = dict(args)
    changed, problems = False, []
    for declared in declared_fields:
        field = shown(declared, args)
        if field.control not in form:
            continue
        current = args.get(field.name, _ABSENT)
        try:
            value = _coerce(field, form[field.control], current)
        except errors.InvalidInput as exc:
            problems.append(str(exc))
            continue
        if value is _ABSENT:  # a blank control for an argument the call does not have
            continue
        if current is _ABSENT or not _same(value, current):
            edited[field.name] = value
            changed = True
    if problems:
        raise errors.InvalidInput("; ".join(problems))
    return edited if changed else None


# --- what became of an item -----------------------------------------------------------------------


class ClosedState(NamedTuple):
    """What a page says about an item that is no longer open: its ``data-state``, title and text."""

    state: str
    title: str
    text: str


def when(at: Any) -> str:
    """A Unix time as ``YYYY-MM-DD HH:MM UTC`` ("an unknown time" when it is not one)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(at)))
    except (TypeError, ValueError, OverflowError):
        return "an unknown time"


def _by(decision: Decision) -> str:
    via = f" via {decision.channel}" if decision.channel else ""
    return f"{decision.decided_by or 'someone'}{via} on {when(decision.at)}"


_VERBS = {FateState.APPROVED: "approved", FateState.DENIED: "denied", FateState.ANSWERED: "answered"}
_ALREADY = "already-resolved", "Already resolved"
_FIXED = {
    FateState.GONE: ClosedState(
        *_ALREADY, "This request is no longer open: it was already resolved, or it no longer exists."
    ),
    FateState.SKIPPED: ClosedState(
        *_ALREADY,
        "Already resolved: another call of the same request was denied, so this one was "
        "skipped and did not run.",
    ),
    FateState.SUPERSEDED: ClosedState(
        "superseded",
        "Superseded",
        "Superseded — the user moved on with a new message before anyone answered. "
        "This call was neither approved nor denied, and it did not run.",
    ),
    FateState.CANCELLED: ClosedState(
        "cancelled",
        "Cancelled",
        "Cancelled — the turn was cancelled before anyone answered. This call did not run.",
    ),
}
"""What a page says for the fates whose text names no one and no time."""


def closed_state(fate: Fate) -> ClosedState:
    """(state, title, text) for an item that is no longer open, from its :func:`item_fate`."""
    state, decision = fate.state, fate.decision
    if state in _FIXED:
        return _FIXED[state]
    if state in _VERBS and decision is not None:
        return ClosedState(*_ALREADY, f"Already resolved: {_VERBS[state]} by {_by(decision)}.")
    if state is FateState.EXPIRED:
        tail = "it was treated as a denial" if fate.denied_by_policy else "this call did not run"
        return ClosedState("expired", "Expired", f"Expired — nobody answered in time, so {tail}.")
    why = decision.why if isinstance(decision, Abandoned) else None
    text = f"This request was closed without a decision: {why or 'it did not run'}."
    return ClosedState("abandoned", "Closed", text)
