"""Magic-link pages: the HTML behind ``/magic/{token}``, and the headers every page is sent with.

Every page is a small self-contained document (no scripts, no external assets, every value escaped
with :func:`e`); :data:`HEADERS` keeps it out of caches, referrers and frames. Each function returns
the whole document as a string; the handler chooses the status and sends it with :data:`HEADERS`.

Standard library only (plus loopengine's records and :mod:`loopengine.channels.magic.form`).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from loopengine.authoring.tools import Tool
from loopengine.channels.magic.form import ClosedState, Field, fields, shown, when
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint, takes_free_text

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


def e(value: Any) -> str:
    """``value`` as text, escaped for HTML content and quoted attributes."""
    return html.escape(str(value), quote=True)


def document(title: str, body: str, state: str) -> str:
    """The whole page around ``body`` (already HTML); ``state`` goes on ``<main data-state>``."""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="robots" content="noindex">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{e(title)} · loopengine</title><style>{CSS}</style></head>"
        f'<body><main data-state="{e(state)}"><h1>{e(title)}</h1>\n{body}\n'
        "<footer>loopengine · this link only works for the one request it was sent about.</footer>"
        "</main></body></html>\n"
    )


# --- pages that say one thing ---------------------------------------------------------------------


class Message(NamedTuple):
    """A page that only says one thing: its title, text, ``data-state`` and style class."""

    title: str
    text: str
    state: str
    css: str = "note"


def message(msg: Message) -> str:
    """The page for ``msg``."""
    return document(msg.title, f'<p class="{msg.css}">{e(msg.text)}</p>', msg.state)


def closed(state: ClosedState) -> str:
    """The page for an item that is no longer open."""
    return message(Message(state.title, state.text, state.state))


def _error(title: str, text: str, state: str = "error") -> Message:
    return Message(title, text, state, "error")


DISABLED = _error("Link not available", "Magic links are not enabled on this deployment.", "disabled")
LINK_EXPIRED = _error(
    "Link expired",
    "This link has expired, so it can no longer be used to look at or decide this request. "
    "Ask for a new link if it still needs a decision.",
    "link-expired",
)
INVALID_LINK = _error(
    "Invalid link",
    "This link is not valid. Check that you opened the whole link from the message you received.",
    "invalid-link",
)
BAD_FORM = _error("Bad form", "The form could not be read.")
TRY_AGAIN = _error(
    "Try again later", "Something went wrong on our side. Nothing was decided; please try again in a minute."
)
BROKEN = _error("Something went wrong", "Something went wrong on our side. Please try again later.")


def failure(status: int) -> Message:
    """The page for a failure on our side: 500, something broke; any other status, try again."""
    return BROKEN if status == 500 else TRY_AGAIN


CHOOSE_DECISION = "Choose Approve or Deny."
NO_ANSWER = "Write an answer (or pick one of the choices)."
CHANGED = "This request changed since the page was loaded. Review it again below before deciding."


def cannot_handle(text: str) -> Message:
    """A request this page cannot handle, and why."""
    return _error("This request cannot be handled", text)


def not_yours(text: str) -> Message:
    """The recipient may not decide this item."""
    return _error("Not yours to decide", text, "forbidden")


def not_an_approver(approvers: Sequence[str], recipient: str) -> Message:
    """The item names its approvers and the link's recipient is not one of them."""
    return not_yours(f"Only {', '.join(approvers)} may decide this call; this link was sent to {recipient}.")


def too_large(limit: int) -> Message:
    """The submitted form is over ``limit`` bytes."""
    return _error("Too large", f"The form is larger than {limit} bytes.")


def too_long(what: str, limit: int) -> str:
    """The form error for a comment or answer over ``limit`` characters."""
    return f"The {what} is longer than {limit} characters."


# --- the forms ----------------------------------------------------------------------------------


def control(field: Field, text: str) -> str:
    """The label and control for one argument, holding ``text``."""
    name = e(field.control)
    control_id = "f-" + e(re.sub(r"[^A-Za-z0-9_-]", "_", field.name))
    star = " *" if field.required else ""
    hint = f' <span class="hint">{e(field.description)}</span>' if field.description else ""
    label = f'<label for="{control_id}">{e(field.name)}{star}{hint}</label>'
    if field.kind == "enum" or field.kind == "boolean":
        options = field.options if field.kind == "enum" else (True, False)
        choices = [field.option_text(o) if field.kind == "enum" else json.dumps(o) for o in options]
        rendered = []
        if text not in choices:
            rendered.append('<option value="" selected>(not set)</option>')
        for choice in choices:
            selected = " selected" if choice == text else ""
            rendered.append(f'<option value="{e(choice)}"{selected}>{e(choice)}</option>')
        return f'{label}<select id="{control_id}" name="{name}">{"".join(rendered)}</select>'
    if field.kind in ("number", "integer"):
        step = "1" if field.kind == "integer" else "any"
        return (
            f'{label}<input id="{control_id}" name="{name}" type="number" step="{step}" '
            f'inputmode="decimal" value="{e(text)}">'
        )
    if field.kind == "string" and "\n" not in text and "\r" not in text and len(text) <= MULTILINE_AFTER:
        return f'{label}<input id="{control_id}" name="{name}" type="text" value="{e(text)}">'
    rows = min(16, max(3, text.count("\n") + 2))
    extra = ' spellcheck="false"' if field.kind == "json" else ""
    # the newline after the opening tag is dropped by every HTML parser, so the value keeps its own
    return f'{label}<textarea id="{control_id}" name="{name}" rows="{rows}"{extra}>\n{e(text)}</textarea>'


def _rows(rows: Sequence[tuple[str, Any]]) -> str:
    return "<dl>" + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in rows) + "</dl>"


def _summary(cp: TurnCheckpoint | None, item: PendingItem, tool: Tool | None, recipient: str) -> str:
    rows: list[tuple[str, Any]] = [("Agent", cp.agent if cp is not None else "")]
    rows.append(("Tool", item.tool))
    if tool is not None and tool.description:
        rows.append(("What it does", tool.description))
    rows.append(("Why it asks", item.reason))
    if cp is not None:
        rows.append(("Requested", when(cp.created_at)))
    if item.expires_at is not None:
        rows.append(("Decide by", when(item.expires_at)))
    rows.append(("Link for", recipient))
    return _rows(rows)


def _json(value: Any) -> str:
    return e(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


def approval_form(
    cp: TurnCheckpoint | None,
    item: PendingItem,
    tool: Tool | None,
    recipient: str,
    values: Mapping[str, str],
    error: str | None = None,
    comment: str = "",
) -> str:
    """Approve or deny a call, its arguments editable where the tool's schema allows."""
    declared = fields(tool)
    parts = [_summary(cp, item, tool, recipient)]
    if error:
        parts.append(f'<p class="error" role="alert">{e(error)}</p>')
    parts.append('<form method="post" novalidate>')
    # pressing Enter in a field must not approve: implicit submission uses the first submit button
    parts.append('<button type="submit" disabled hidden aria-hidden="true"></button>')
    if declared is None:
        parts.append(f"<fieldset><legend>Arguments</legend><pre>{_json(item.args)}</pre></fieldset>")
    else:
        known = {f.name for f in declared}
        controls = [control(shown(f, item.args), values.get(f.control, "")) for f in declared]
        parts.append(
            "<fieldset><legend>Arguments (edit before approving if needed)</legend>"
            + "".join(controls)
            + "</fieldset>"
        )
        others = {k: v for k, v in item.args.items() if k not in known}
        if others:
            parts.append(f"<fieldset><legend>Other arguments</legend><pre>{_json(others)}</pre></fieldset>")
    parts.append(
        '<label for="comment">Comment <span class="hint">(optional; passed on with your decision)</span>'
        f'</label><textarea id="comment" name="comment" rows="3">\n{e(comment)}</textarea>'
    )
    parts.append(f'<input type="hidden" name="argsHash" value="{e(item.args_hash)}">')
    parts.append(
        '<div class="actions">'
        '<button class="approve" type="submit" name="decision" value="approve">Approve</button>'
        '<button class="deny" type="submit" name="decision" value="deny">Deny</button></div></form>'
    )
    return document(f"Approve {item.tool}?", "\n".join(parts), "form")


def question_form(
    cp: TurnCheckpoint | None, item: PendingItem, recipient: str, error: str | None = None, answer: str = ""
) -> str:
    """Answer the agent's question, by one of its choices or in words."""
    question = item.args.get("question")
    options = item.args.get("options")
    choices = [str(o) for o in options] if isinstance(options, list) else []
    parts = [_rows([("Agent", cp.agent if cp is not None else ""), ("Link for", recipient)])]
    parts.append(f'<p class="note">{e(question if isinstance(question, str) else item.reason)}</p>')
    if error:
        parts.append(f'<p class="error" role="alert">{e(error)}</p>')
    parts.append('<form method="post" novalidate>')
    parts.append('<button type="submit" disabled hidden aria-hidden="true"></button>')
    if choices:
        buttons = "".join(
            f'<button class="choice" type="submit" name="choice" value="{e(c)}">{e(c)}</button>'
            for c in choices
        )
        parts.append(f'<div class="actions">{buttons}</div>')
    if takes_free_text(item):  # else one of the options is the answer (checkpoint.check_answer)
        parts.append(
            '<label for="answer">Your answer</label>'
            f'<textarea id="answer" name="answer" rows="3">\n{e(answer)}</textarea>'
        )
        parts.append(
            '<div class="actions"><button class="approve" type="submit" name="decision" value="answer">'
            "Send answer</button></div>"
        )
    parts.append("</form>")
    return document("The agent has a question", "\n".join(parts), "form")


# --- after deciding -------------------------------------------------------------------------------


def next_step(outstanding: int) -> str:
    """What happens now, given how many other items of the request still wait."""
    if outstanding:
        n = outstanding
        return (
            f"{n} other item{'s' if n != 1 else ''} of this request still wait{'s' if n == 1 else ''} "
            "for a decision; the agent resumes once they are decided."
        )
    return "The agent is resuming with your decision."


def answered(answer: str, outstanding: int) -> str:
    """The answer was sent."""
    body = f'<p class="ok">Thank you — your answer was sent.</p><pre>{e(answer)}</pre>'
    body += f'<p class="note">{e(next_step(outstanding))}</p>'
    return document("Answer sent", body, "answered")


def denied(comment: str) -> str:
    """The call was denied."""
    text = "Denied. The call did not run, and the agent was told you said no."
    return document("Denied", f'<p class="ok">{e(text)}</p>{_comment_note(comment)}', "denied")


def approved(item: PendingItem, edited: JsonDict | None, outstanding: int, comment: str) -> str:
    """The call was approved and ran, with ``edited`` args when the approver changed them."""
    ran = edited if edited is not None else item.args
    note = " with your edits" if edited is not None else ""
    text = f"Approved — {item.tool} ran{note}. {next_step(outstanding)}"
    body = f'<p class="ok">{e(text)}</p><pre>{_json(ran)}</pre>{_comment_note(comment)}'
    return document("Approved", body, "approved")


def _comment_note(comment: str) -> str:
    return f"<p>Your comment: {e(comment)}</p>" if comment else ""
