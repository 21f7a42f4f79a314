"""Magic-link pages: ``GET /magic/{token}`` shows one pending item, ``POST /magic/{token}`` decides it.

The token (:mod:`loopengine.magic`) is the only credential: it names one pendingId and the recipient
it was sent to, who is recorded as ``decidedBy`` with channel ``magic-link``. GET never changes
anything (mail scanners and link previews fetch links): it renders the item, its arguments as a
form where the tool's schema allows editing, or what became of it. POST decides through the same
``Engine.resolve`` / ``Engine.answer`` the JSON routes use.

Every reply is a small self-contained HTML page (no scripts, no external assets, everything
escaped) with headers that keep it out of caches, referrers and frames. Errors are handled here,
as pages, so the api's JSON error handlers never see them; bad input is never a 500.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from handlers import root, web
from handlers.observability import logger
from loopengine import errors
from loopengine.checkpoint import PendingItem, TurnCheckpoint
from loopengine.engine import Engine
from loopengine.lifecycle import expire_due
from loopengine.magic import CHANNEL, SECRET_ENV, InvalidMagicLink, MagicClaims, MagicLinkReason, verify_token
from loopengine.resolution import Decider, Resolution
from loopengine.tools import Tool
from loopengine.turns import StopReason, TurnRecord

router = Router()  # type: ignore[no-untyped-call]

JsonDict = dict[str, Any]
ARG_PREFIX = "arg."
MAX_COMMENT_CHARS = 4000
MAX_FORM_FIELDS = 200
MULTILINE_AFTER = 80

HEADERS: Mapping[str, str] = {
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'"
    ),
}

CSS = """
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
main{max-width:42rem;margin:2rem auto;background:#fff;padding:1.5rem 2rem;border-radius:8px;
box-shadow:0 1px 3px rgba(0,0,0,.12)}
h1{font-size:1.4rem;margin:0 0 1rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem;margin:0 0 1.2rem}
dt{font-weight:600;color:#555}dd{margin:0;overflow-wrap:anywhere}
fieldset{border:1px solid #d5d8de;border-radius:6px;margin:0 0 1rem;padding:.8rem 1rem}
legend{font-weight:600;padding:0 .3rem}
label{display:block;font-weight:600;margin:.6rem 0 .2rem}
.hint{font-weight:400;color:#666;font-size:.85rem}
input,select,textarea{box-sizing:border-box;width:100%;font:inherit;padding:.4rem;border:1px solid #b9bec7;
border-radius:4px}
textarea{min-height:4.5rem;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9rem}
pre{background:#f6f7f9;padding:.6rem;border-radius:4px;overflow:auto;white-space:pre-wrap}
.actions{display:flex;gap:.8rem;margin-top:1.2rem}
button{font:inherit;font-weight:600;padding:.55rem 1.4rem;border-radius:4px;border:0;cursor:pointer}
.approve{background:#1f7a3a;color:#fff}.deny{background:#b3261e;color:#fff}.choice{background:#2d5fb8;color:#fff}
.note{padding:.7rem 1rem;border-radius:4px;background:#eef3fb;margin:0 0 1rem}
.error{padding:.7rem 1rem;border-radius:4px;background:#fdecea;color:#7a1c16;margin:0 0 1rem}
.ok{padding:.7rem 1rem;border-radius:4px;background:#e7f5ec;color:#184d2a;margin:0 0 1rem}
footer{margin-top:1.5rem;color:#777;font-size:.8rem}
""".strip()


class _Stop(Exception):
    """Stop handling and answer with this page."""

    def __init__(self, response: Response[str]) -> None:
        super().__init__(response.status_code)
        self.response = response


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _page(status: int, title: str, body: str, state: str) -> Response[str]:
    document = (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="robots" content="noindex">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{_e(title)} · loopengine</title><style>{CSS}</style></head>"
        f'<body><main data-state="{_e(state)}"><h1>{_e(title)}</h1>\n{body}\n'
        "<footer>loopengine · this link only works for the one request it was sent about.</footer>"
        "</main></body></html>\n"
    )
    return Response(
        status_code=status, content_type="text/html; charset=utf-8", body=document, headers=dict(HEADERS)
    )


def _message_page(status: int, title: str, text: str, state: str, css: str = "note") -> Response[str]:
    return _page(status, title, f'<p class="{css}">{_e(text)}</p>', state)


# --- routes -----------------------------------------------------------------------------------


@router.get("/magic/<token>")
def show(token: str) -> Response[str]:
    """Render the pending item behind ``token`` (or what became of it); changes nothing."""
    return _guarded(lambda: _show(token))


@router.post("/magic/<token>")
def decide(token: str) -> Response[str]:
    """Decide the pending item behind ``token`` from the submitted form."""
    return _guarded(lambda: _decide(token))


def _guarded(run: Callable[[], Response[str]]) -> Response[str]:
    """Turn every failure into a page: bad input is a 4xx page, never a 500 or a stack trace."""
    try:
        return run()
    except _Stop as stop:
        return stop.response
    except errors.LoopengineError as exc:
        status = next((s for cls, s in web.STATUS if isinstance(exc, cls)), 500)
        if status >= 500:
            logger.warning("magic link page failed", extra={"error": type(exc).__name__})
            text = "Something went wrong on our side. Nothing was decided; please try again in a minute."
            return _message_page(status if status != 500 else 503, "Try again later", text, "error", "error")
        return _message_page(status, "This request cannot be handled", str(exc), "error", "error")
    except Exception:
        logger.exception("magic link page failed")
        text = "Something went wrong on our side. Please try again later."
        return _message_page(500, "Something went wrong", text, "error", "error")


# --- the item behind a token --------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    """A verified token and what it points at."""

    engine: Engine
    claims: MagicClaims
    cp: TurnCheckpoint | None
    turn: TurnRecord | None

    @property
    def pending_id(self) -> str:
        return self.claims.pending_id

    def open_item(self) -> PendingItem | None:
        """The item if it is still waiting for a decision (and not past its deadline)."""
        if self.cp is None or self.cp.closed:
            return None
        item = self.cp.outstanding.get(self.pending_id)
        if item is None or (item.expires_at is not None and item.expires_at <= self._now()):
            return None
        return item

    def tool(self, name: str) -> Tool | None:
        """The tool as the turn's config snapshot describes it (None when unavailable)."""
        if self.turn is None:
            return None
        try:
            return self.engine.rt.config_of(self.turn).tool(name)
        except errors.NotFound:
            return None

    def _now(self) -> float:
        return self.engine.rt.stores.clock.now()


def _context(token: str) -> _Context:
    secret = os.environ.get(SECRET_ENV, "")
    if not secret:
        text = "Magic links are not enabled on this deployment."
        raise _Stop(_message_page(404, "Link not available", text, "disabled", "error"))
    engine = root.engine()
    try:
        claims = verify_token(secret, token, engine.rt.stores.clock.now())
    except InvalidMagicLink as exc:
        if exc.reason is MagicLinkReason.EXPIRED:
            text = (
                "This link has expired, so it can no longer be used to look at or decide this "
                "request. Ask for a new link if it still needs a decision."
            )
            raise _Stop(_message_page(410, "Link expired", text, "link-expired", "error")) from None
        text = "This link is not valid. Check that you opened the whole link from the message you received."
        raise _Stop(_message_page(400, "Invalid link", text, "invalid-link", "error")) from None
    logger.set_correlation_id(claims.pending_id)
    return _load(engine, claims)


def _load(engine: Engine, claims: MagicClaims) -> _Context:
    cp = engine.rt.stores.checkpoints.find_by_pending(claims.pending_id)
    turn = engine.rt.stores.turns.get_turn(cp.turn_id) if cp is not None else None
    return _Context(engine, claims, cp, turn)


def _show(token: str) -> Response[str]:
    ctx = _context(token)
    item = ctx.open_item()
    if item is None:
        return _closed_page(ctx)
    _check_approver(ctx, item)
    if item.kind == "question":
        return _question_form(ctx, item)
    return _approval_form(ctx, item, _initial_values(ctx, item))


def _check_approver(ctx: _Context, item: PendingItem) -> None:
    if item.approvers and ctx.claims.recipient not in item.approvers:
        who = ", ".join(item.approvers)
        text = f"Only {who} may decide this call; this link was sent to {ctx.claims.recipient}."
        raise _Stop(_message_page(403, "Not yours to decide", text, "forbidden", "error"))


# --- what became of an item that is not open -------------------------------------------------


def _when(at: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(at)))
    except (TypeError, ValueError, OverflowError):
        return "an unknown time"


def _by(decision: JsonDict) -> str:
    who = decision.get("decidedBy") or "someone"
    channel = decision.get("channel")
    via = f" via {channel}" if channel else ""
    return f"{who}{via} on {_when(decision.get('at'))}"


def _closed_state(ctx: _Context) -> tuple[str, str, str]:
    """(state, title, text) for an item that is no longer open."""
    cp, turn = ctx.cp, ctx.turn
    if cp is None:
        text = "This request is no longer open: it was already resolved, or it no longer exists."
        return "already-resolved", "Already resolved", text
    item = cp.outstanding.get(ctx.pending_id)
    if item is not None and not cp.closed:  # open, but past its deadline (the sweep has not run yet)
        text = "Expired — nobody answered in time, so this call did not run."
        return "expired", "Expired", text
    mine = [d for d in cp.decisions if d.get("pendingId") == ctx.pending_id]
    decision = mine[-1] if mine else {}
    kind = decision.get("decision")
    if kind == "approve":
        return "already-resolved", "Already resolved", f"Already resolved: approved by {_by(decision)}."
    if kind == "deny":
        return "already-resolved", "Already resolved", f"Already resolved: denied by {_by(decision)}."
    if kind == "answer":
        return "already-resolved", "Already resolved", f"Already resolved: answered by {_by(decision)}."
    if kind == "skipped":
        text = (
            "Already resolved: another call of the same request was denied, so this one was "
            "skipped and did not run."
        )
        return "already-resolved", "Already resolved", text
    if kind == "expired":
        as_denial = decision.get("onExpiry") == "deny"
        tail = "it was treated as a denial" if as_denial else "this call did not run"
        return "expired", "Expired", f"Expired — nobody answered in time, so {tail}."
    stop = (turn.stop_reason or turn.stop_requested) if turn is not None else None
    if kind == "abandoned" and stop is StopReason.SUPERSEDED:
        text = (
            "Superseded — the user moved on with a new message before anyone answered. "
            "This call was neither approved nor denied, and it did not run."
        )
        return "superseded", "Superseded", text
    if kind == "abandoned" and stop is StopReason.CANCELLED:
        text = "Cancelled — the turn was cancelled before anyone answered. This call did not run."
        return "cancelled", "Cancelled", text
    if kind == "abandoned":
        text = f"This request was closed without a decision: {decision.get('why') or 'it did not run'}."
        return "abandoned", "Closed", text
    text = "This request is no longer open: it was already resolved."
    return "already-resolved", "Already resolved", text


def _closed_page(ctx: _Context, status: int = 200) -> Response[str]:
    state, title, text = _closed_state(ctx)
    return _message_page(status, title, text, state)


# --- the forms ----------------------------------------------------------------------------------

FieldKind = Literal["string", "number", "integer", "boolean", "enum", "json"]
SIMPLE_TYPES: Mapping[str, FieldKind] = {
    "string": "string",
    "number": "number",
    "integer": "integer",
    "boolean": "boolean",
}


@dataclass(frozen=True)
class _Field:
    """One top-level argument as a form control."""

    name: str
    kind: FieldKind
    required: bool
    nullable: bool = False
    options: tuple[Any, ...] = ()
    description: str = ""

    @property
    def control(self) -> str:
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


def _fields(tool: Tool | None) -> list[_Field] | None:
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
        field = _Field(str(name), kind, name in wanted, nullable, options, str(description or ""))
        out.append(field)
    return out


def _shown(field: _Field, args: JsonDict) -> _Field:
    """The field as it will be shown for these args: a value its control cannot hold becomes JSON."""
    if field.name in args and not field.fits(args[field.name]):
        return _Field(field.name, "json", field.required, False, (), field.description)
    return field


def _text_of(field: _Field, args: JsonDict) -> str:
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


def _initial_values(ctx: _Context, item: PendingItem) -> dict[str, str]:
    fields = _fields(ctx.tool(item.tool)) or []
    return {f.control: _text_of(_shown(f, item.args), item.args) for f in fields}


def _control(field: _Field, text: str) -> str:
    name = _e(field.control)
    control_id = "f-" + _e(re.sub(r"[^A-Za-z0-9_-]", "_", field.name))
    star = " *" if field.required else ""
    hint = f' <span class="hint">{_e(field.description)}</span>' if field.description else ""
    label = f'<label for="{control_id}">{_e(field.name)}{star}{hint}</label>'
    if field.kind == "enum" or field.kind == "boolean":
        options = field.options if field.kind == "enum" else (True, False)
        choices = [field.option_text(o) if field.kind == "enum" else json.dumps(o) for o in options]
        rendered = []
        if text not in choices:
            rendered.append('<option value="" selected>(not set)</option>')
        for choice in choices:
            selected = " selected" if choice == text else ""
            rendered.append(f'<option value="{_e(choice)}"{selected}>{_e(choice)}</option>')
        return f'{label}<select id="{control_id}" name="{name}">{"".join(rendered)}</select>'
    if field.kind in ("number", "integer"):
        step = "1" if field.kind == "integer" else "any"
        return (
            f'{label}<input id="{control_id}" name="{name}" type="number" step="{step}" '
            f'inputmode="decimal" value="{_e(text)}">'
        )
    if field.kind == "string" and "\n" not in text and "\r" not in text and len(text) <= MULTILINE_AFTER:
        return f'{label}<input id="{control_id}" name="{name}" type="text" value="{_e(text)}">'
    rows = min(16, max(3, text.count("\n") + 2))
    extra = ' spellcheck="false"' if field.kind == "json" else ""
    # the newline after the opening tag is dropped by every HTML parser, so the value keeps its own
    return f'{label}<textarea id="{control_id}" name="{name}" rows="{rows}"{extra}>\n{_e(text)}</textarea>'


def _summary(ctx: _Context, item: PendingItem, tool: Tool | None) -> str:
    cp = ctx.cp
    rows = [("Agent", cp.agent if cp is not None else "")]
    rows.append(("Tool", item.tool))
    if tool is not None and tool.description:
        rows.append(("What it does", tool.description))
    rows.append(("Why it asks", item.reason))
    if cp is not None:
        rows.append(("Requested", _when(cp.created_at)))
    if item.expires_at is not None:
        rows.append(("Decide by", _when(item.expires_at)))
    rows.append(("Link for", ctx.claims.recipient))
    return "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows) + "</dl>"


def _approval_form(
    ctx: _Context,
    item: PendingItem,
    values: Mapping[str, str],
    status: int = 200,
    error: str | None = None,
    comment: str = "",
) -> Response[str]:
    tool = ctx.tool(item.tool)
    fields = _fields(tool)
    parts = [_summary(ctx, item, tool)]
    if error:
        parts.append(f'<p class="error" role="alert">{_e(error)}</p>')
    parts.append('<form method="post" novalidate>')
    # pressing Enter in a field must not approve: implicit submission uses the first submit button
    parts.append('<button type="submit" disabled hidden aria-hidden="true"></button>')
    if fields is None:
        shown = json.dumps(item.args, indent=2, ensure_ascii=False, sort_keys=True)
        parts.append(f"<fieldset><legend>Arguments</legend><pre>{_e(shown)}</pre></fieldset>")
    else:
        known = {f.name for f in fields}
        controls = [_control(_shown(f, item.args), values.get(f.control, "")) for f in fields]
        parts.append(
            "<fieldset><legend>Arguments (edit before approving if needed)</legend>"
            + "".join(controls)
            + "</fieldset>"
        )
        others = {k: v for k, v in item.args.items() if k not in known}
        if others:
            shown = json.dumps(others, indent=2, ensure_ascii=False, sort_keys=True)
            parts.append(f"<fieldset><legend>Other arguments</legend><pre>{_e(shown)}</pre></fieldset>")
    parts.append(
        '<label for="comment">Comment <span class="hint">(optional; passed on with your decision)</span>'
        f'</label><textarea id="comment" name="comment" rows="3">\n{_e(comment)}</textarea>'
    )
    parts.append(f'<input type="hidden" name="argsHash" value="{_e(item.args_hash)}">')
    parts.append(
        '<div class="actions">'
        '<button class="approve" type="submit" name="decision" value="approve">Approve</button>'
        '<button class="deny" type="submit" name="decision" value="deny">Deny</button></div></form>'
    )
    return _page(status, f"Approve {item.tool}?", "\n".join(parts), "form")


def _question_form(
    ctx: _Context, item: PendingItem, status: int = 200, error: str | None = None, answer: str = ""
) -> Response[str]:
    question = item.args.get("question")
    options = item.args.get("options")
    choices = [str(o) for o in options] if isinstance(options, list) else []
    rows = [("Agent", ctx.cp.agent if ctx.cp is not None else ""), ("Link for", ctx.claims.recipient)]
    parts = ["<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows) + "</dl>"]
    parts.append(f'<p class="note">{_e(question if isinstance(question, str) else item.reason)}</p>')
    if error:
        parts.append(f'<p class="error" role="alert">{_e(error)}</p>')
    parts.append('<form method="post" novalidate>')
    parts.append('<button type="submit" disabled hidden aria-hidden="true"></button>')
    if choices:
        buttons = "".join(
            f'<button class="choice" type="submit" name="choice" value="{_e(c)}">{_e(c)}</button>'
            for c in choices
        )
        parts.append(f'<div class="actions">{buttons}</div>')
    parts.append(
        f'<label for="answer">Your answer</label><textarea id="answer" name="answer" rows="3">\n{_e(answer)}'
        "</textarea>"
    )
    parts.append(
        '<div class="actions"><button class="approve" type="submit" name="decision" value="answer">'
        "Send answer</button></div></form>"
    )
    return _page(status, "The agent has a question", "\n".join(parts), "form")


# --- deciding -------------------------------------------------------------------------------------


def _form(ctx_event: Any) -> dict[str, str]:
    raw = ctx_event.body or ""
    size = len(raw) * 3 // 4 if ctx_event.is_base64_encoded else len(raw.encode())
    if size > web.MAX_BODY_BYTES:
        text = f"The form is larger than {web.MAX_BODY_BYTES} bytes."
        raise _Stop(_message_page(413, "Too large", text, "error", "error"))
    try:
        decoded = ctx_event.decoded_body or ""
        parsed = parse_qs(decoded, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:
        raise _Stop(_message_page(400, "Bad form", "The form could not be read.", "error", "error")) from None
    return {key: values[0] for key, values in parsed.items()}


def _decide(token: str) -> Response[str]:
    ctx = _context(token)
    form = _form(router.current_event)
    item = ctx.open_item()
    if item is None:
        if ctx.cp is not None and ctx.pending_id in ctx.cp.outstanding and not ctx.cp.closed:
            # past its deadline: record the expiry now, as the sweep would (GET never does this)
            expire_due(ctx.engine.rt, ctx.cp)
            return _closed_page(_load(ctx.engine, ctx.claims))
        return _closed_page(ctx)
    _check_approver(ctx, item)
    if item.kind == "question":
        return _decide_question(ctx, item, form)
    comment = form.get("comment", "").replace("\r\n", "\n").strip()
    values = {**_initial_values(ctx, item), **{k: v for k, v in form.items() if k.startswith(ARG_PREFIX)}}
    decision = form.get("decision")
    if decision not in ("approve", "deny"):
        return _approval_form(ctx, item, values, 400, "Choose Approve or Deny.", comment)
    if len(comment) > MAX_COMMENT_CHARS:
        error = f"The comment is longer than {MAX_COMMENT_CHARS} characters."
        return _approval_form(ctx, item, values, 400, error, comment)
    edited: JsonDict | None = None
    if decision == "approve":
        try:
            edited = _edits(ctx, item, form)
        except errors.InvalidInput as exc:
            return _approval_form(ctx, item, values, 400, str(exc), comment)
    try:
        res = _resolve(ctx, decision, edited, comment or None, form.get("argsHash") or None)
    except errors.Conflict:
        fresh = _load(ctx.engine, ctx.claims)
        current = fresh.open_item()
        if current is None:
            return _closed_page(fresh)
        error = "This request changed since the page was loaded. Review it again below before deciding."
        return _approval_form(fresh, current, _initial_values(fresh, current), 409, error, comment)
    except errors.Forbidden as exc:
        return _message_page(403, "Not yours to decide", str(exc), "forbidden", "error")
    except errors.InvalidInput as exc:
        return _approval_form(ctx, item, values, 400, str(exc), comment)
    return _after(ctx, res, item, edited, comment)


def _resolve(
    ctx: _Context, decision: str, edited: JsonDict | None, comment: str | None, args_hash: str | None
) -> Resolution:
    who = Decider(ctx.claims.recipient, CHANNEL)
    return ctx.engine.resolve(
        ctx.pending_id, decision, who, edited_args=edited, comment=comment, args_hash=args_hash
    )


def _decide_question(ctx: _Context, item: PendingItem, form: dict[str, str]) -> Response[str]:
    answer = (form.get("choice") or form.get("answer") or "").replace("\r\n", "\n").strip()
    if not answer:
        return _question_form(ctx, item, 400, "Write an answer (or pick one of the choices).")
    if len(answer) > MAX_COMMENT_CHARS:
        error = f"The answer is longer than {MAX_COMMENT_CHARS} characters."
        return _question_form(ctx, item, 400, error, answer)
    try:
        res = ctx.engine.answer(ctx.pending_id, answer, Decider(ctx.claims.recipient, CHANNEL))
    except errors.InvalidInput as exc:
        return _question_form(ctx, item, 400, str(exc), answer)
    if res.already_resolved:
        return _closed_page(_load(ctx.engine, ctx.claims))
    body = f'<p class="ok">Thank you — your answer was sent.</p><pre>{_e(answer)}</pre>'
    body += f'<p class="note">{_e(_next_step(res))}</p>'
    return _page(200, "Answer sent", body, "answered")


def _next_step(res: Resolution) -> str:
    if res.outstanding:
        n = res.outstanding
        return (
            f"{n} other item{'s' if n != 1 else ''} of this request still wait{'s' if n == 1 else ''} "
            "for a decision; the agent resumes once they are decided."
        )
    return "The agent is resuming with your decision."


def _after(
    ctx: _Context, res: Resolution, item: PendingItem, edited: JsonDict | None, comment: str | None
) -> Response[str]:
    if res.already_resolved:
        return _closed_page(_load(ctx.engine, ctx.claims))
    comment_note = f"<p>Your comment: {_e(comment)}</p>" if comment else ""
    if res.denied:
        text = "Denied. The call did not run, and the agent was told you said no."
        body = f'<p class="ok">{_e(text)}</p>{comment_note}'
        return _page(200, "Denied", body, "denied")
    ran = edited if edited is not None else item.args
    note = " with your edits" if edited is not None else ""
    text = f"Approved — {item.tool} ran{note}. {_next_step(res)}"
    shown = json.dumps(ran, indent=2, ensure_ascii=False, sort_keys=True)
    body = f'<p class="ok">{_e(text)}</p><pre>{_e(shown)}</pre>{comment_note}'
    return _page(200, "Approved", body, "approved")


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


def _coerce(field: _Field, text: str, current: Any) -> Any:
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
        return json.loads(text)
    except ValueError:
        raise errors.InvalidInput(f"{field.name}: not valid JSON") from None


def _number(field: _Field, text: str, current: Any) -> Any:
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


def _edits(ctx: _Context, item: PendingItem, form: Mapping[str, str]) -> JsonDict | None:
    """The edited args if any submitted field differs from the pending args, else None.

    A field missing from the form is unchanged; a blank field of an absent argument stays absent.
    Raises ``InvalidInput`` naming the fields whose text does not fit their type.
    """
    fields = _fields(ctx.tool(item.tool))
    if fields is None:
        return None
    edited = dict(item.args)
    changed, problems = False, []
    for declared in fields:
        field = _shown(declared, item.args)
        if field.control not in form:
            continue
        current = item.args.get(field.name, _ABSENT)
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
