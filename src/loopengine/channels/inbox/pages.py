"""The approvals inbox's pages, as :mod:`loopengine.channels.inbox.routes` describes them.

List, decide, assets.

Imported by the routes on the first inbox request (and before a SnapStart snapshot). The routes
resolve the signed-in principal first (401 and the browser's login prompt before anything here
runs); every failure here is a page, never a 500 or a stack trace.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from loopengine.app import api_models as m
from loopengine.app.engine import Engine
from loopengine.app.request.items import ItemView
from loopengine.channels.inbox import cards, csrf, render
from loopengine.channels.inbox import routes as route
from loopengine.channels.magic import form as forms
from loopengine.channels.magic import pages as magic_pages
from loopengine.domain.base import errors, ids
from loopengine.domain.base.limits import MAX_ANSWER_CHARS, MAX_COMMENT_CHARS, MAX_FORM_FIELDS
from loopengine.domain.checkpoint import PendingItem
from loopengine.domain.decisions import Approval, Denial, Reply
from loopengine.domain.principals import Principal
from loopengine.http import root as roots
from loopengine.http import secrets, web
from loopengine.http.observability import logger

HTML = "text/html; charset=utf-8"


_Stop = web.Stop


def _html(status: int, document: str) -> Response[str]:
    return Response(status_code=status, content_type=HTML, body=document, headers=dict(render.HEADERS))


def _message(status: int, title: str, text: str, state: str = "error") -> Response[str]:
    return _html(status, render.message(title, text, state))


def _as_inbox(who: Principal) -> Principal:
    """The signed-in principal, deciding through channel ``inbox``."""
    return dataclasses.replace(who, channel=cards.CHANNEL)


def _guarded(run: Callable[[], Response[str]]) -> Response[str]:
    """Every failure as a page: bad input is a 4xx page, never a 500 or a stack trace."""
    return web.guarded(run, "inbox", _failed, _refused)


def _failed(status: int) -> Response[str]:
    msg = magic_pages.failure(status)
    return _message(status, msg.title, msg.text)


def _refused(status: int, why: str) -> Response[str]:
    return _message(status, "This cannot be done", why, "not-found" if status == 404 else "error")


# --- GET /inbox -----------------------------------------------------------------------------------


def show(who: Principal, tenant: str | None, agent: str | None, item: str | None) -> Response[str]:
    """The inbox page (changes nothing)."""
    inbox = _as_inbox(who)
    return _guarded(lambda: _inbox(inbox, render.Filter(tenant, agent), flash_for=item))


def _key() -> bytes | None:
    return csrf.key_from(secrets.environ())


def _scope(who: Principal, shown: render.Filter) -> str:
    if who.tenants is None:
        named = cards.tenant_label(shown.tenant) if shown.tenant is not None else cards.DEFAULT_TENANT
        return f"operator of every tenant · showing {named} (name a tenant above to see another)"
    return "tenants: " + ", ".join(cards.tenant_label(t) for t in sorted(who.tenants))


def _inbox(
    who: Principal,
    shown: render.Filter,
    status: int = 200,
    flash_for: str | None = None,
    problem: cards.Card | None = None,
) -> Response[str]:
    engine, key = roots.engine(), _key()
    flash, flash_turn = _flash(engine, who, flash_for)
    listed = engine.open_items(agent=shown.agent, tenant=shown.tenant, who=who)
    pending = [str(entry["pendingId"]) for entry in listed]
    rest = [p for p in pending if problem is None or p != problem.pending_id]
    # the decided item's turn first (it resumes, and may ask again), then the listed items' turns
    turns = [*([flash_turn] if flash_turn else []), *(str(entry["turnId"]) for entry in listed)]
    follow = _cursors(engine, who, list(dict.fromkeys(turns)))  # read before the items
    now = engine.now()
    found = [_card(engine.item(p, who), who, now, key) for p in rest[: route.MAX_ITEMS]]
    page = render.Page(
        who=who.id,
        tenants=_scope(who, shown),
        filter=shown,
        groups=cards.groups([c for c in found if c is not None], now),
        listed=pending,
        follow=follow,
        can_decide=key is not None,
        flash=flash,
        problem=problem,
        more=max(0, len(rest) - route.MAX_ITEMS),
    )
    return _html(status, render.inbox(page))


def _card(
    view: ItemView, who: Principal, now: float, key: bytes | None, attempt: cards.Attempt | None = None
) -> cards.Card | None:
    token = csrf.issue(key, who, view.pending_id) if key is not None else ""
    return cards.card(view, who, now, token, attempt)


def _cursors(engine: Engine, who: Principal, turns: list[str]) -> list[tuple[str, int]]:
    """(turn, its events cursor) for the first ``MAX_FOLLOWED`` (routes_inbox) of ``turns`` still going."""
    out = []
    for turn in turns:
        _events, cursor, finished = engine.events(turn, who=who)
        if not finished:
            out.append((turn, cursor))
        if len(out) == route.MAX_FOLLOWED:
            break
    return out


def _flash(engine: Engine, who: Principal, pending_id: str | None) -> tuple[cards.Flash | None, str | None]:
    """What became of ``pending_id`` (None while open, or another tenant's), and its turn."""
    if pending_id is None or not ids.is_pending_id(pending_id):
        return None, None
    try:
        view = engine.item(pending_id, who)
    except errors.NotFound:  # another tenant's: say nothing about it
        return None, None
    return cards.flash(view, who), view.checkpoint.turn_id if view.checkpoint is not None else None


# --- POST /inbox/items/{pendingId} ----------------------------------------------------------------


def decide(who: Principal, pending_id: str, event: BaseProxyEvent) -> Response[str]:
    """Decide one item from the inbox's form ``event`` carries, as the signed-in principal."""
    inbox = _as_inbox(who)
    return _guarded(lambda: _decide(pending_id, inbox, event))


def _back(shown: render.Filter, pending_id: str) -> Response[str]:
    """303 to the inbox (same filter), whose flash says what became of ``pending_id``."""
    headers = {**render.HEADERS, "Location": route.PAGE_PATH + shown.query(item=pending_id)}
    return Response(status_code=303, content_type=HTML, body="", headers=headers)


def _form(event: Any) -> dict[str, str]:
    try:
        return web.form_body(event, MAX_FORM_FIELDS)
    except web.HttpError:  # the only one form_body raises is 413
        too_large = f"The form is larger than {web.MAX_BODY_BYTES} bytes."
        raise _Stop(_message(413, "Too large", too_large)) from None
    except errors.InvalidInput:  # not UTF-8, lone surrogates, too many fields
        raise _Stop(_message(400, "Bad form", "The form could not be read.")) from None


def _filter_of(form: Mapping[str, str]) -> render.Filter:
    """The filter a form came from (dropped when not of the form the page would have sent)."""
    tenant, agent = form.get("tenant"), form.get("agent")
    return render.Filter(
        tenant if tenant is not None and ids.is_tenant(tenant) else None,
        agent if agent is not None and re.fullmatch(m.AGENT_PATTERN, agent) else None,
    )


def _checked(pending_id: str, event: BaseProxyEvent) -> tuple[bytes, dict[str, str]]:
    """The key and the form of a post that passed the cross-site checks (else a 4xx/503 page)."""
    if not ids.is_pending_id(pending_id):
        raise _Stop(_message(404, "Not found", "There is no item of that form.", "not-found"))
    env = secrets.environ()
    why = csrf.cross_site(event.headers or {}, env.get(route.PUBLIC_URL_ENV) or "")
    if why is not None:
        raise _Stop(_message(403, "Refused", f"Nothing was decided: {why}.", "cross-site"))
    key = csrf.key_from(env)
    if key is None:
        text = "Deciding from the inbox needs LOOPENGINE_INBOX_SECRET (or LOOPENGINE_MAGIC_LINK_SECRET)."
        raise _Stop(_message(503, "Inbox not configured", text, "disabled"))
    return key, _form(event)


def _decide(pending_id: str, who: Principal, event: BaseProxyEvent) -> Response[str]:
    key, form = _checked(pending_id, event)
    shown = _filter_of(form)
    engine = roots.engine()
    logger.set_correlation_id(pending_id)
    view = engine.item(pending_id, who)  # another tenant's item: NotFound, 404
    if not csrf.valid(key, who, pending_id, form.get(csrf.FIELD, "")):
        text = (
            "Nothing was decided: this form was not issued to you for this item (it may be from before a "
            "restart, or from another page). Reload the inbox and decide again."
        )
        raise _Stop(_message(403, "Form not valid", text, "bad-token"))
    item = view.item
    if item is None:  # a late click: record a due expiry, then say what became of it
        engine.item(pending_id, who, settle=True)
        return _back(shown, pending_id)
    post = _Post(engine, who, key, view, item, shown, form)
    return post.answer() if item.kind == "question" else post.resolve()


def _text(value: str | None) -> str:
    return (value or "").replace("\r\n", "\n").strip()


@dataclasses.dataclass(frozen=True)
class _Post:
    """One checked form post on an open item."""

    engine: Engine
    who: Principal
    key: bytes
    view: ItemView
    item: PendingItem
    shown: render.Filter
    form: Mapping[str, str]

    def again(self, status: int, attempt: cards.Attempt, view: ItemView | None = None) -> Response[str]:
        """The inbox with this item first, saying why it was not decided (its inputs kept)."""
        problem = _card(view or self.view, self.who, self.engine.now(), self.key, attempt)
        if problem is None:  # it closed meanwhile
            return _back(self.shown, self.item.pending_id)
        return _inbox(self.who, self.shown, status, problem=problem)

    def resolve(self) -> Response[str]:
        """Approve (with edits, if the form changed an argument) or deny."""
        item, form, pending_id = self.item, self.form, self.item.pending_id
        comment = _text(form.get("comment"))
        values = {**forms.initial_values(self.view.tool, item.args), **forms.submitted_values(form)}
        decision = form.get("decision")
        if decision not in ("approve", "deny"):
            return self.again(400, cards.Attempt(magic_pages.CHOOSE_DECISION, values, comment))
        if len(comment) > MAX_COMMENT_CHARS:
            error = magic_pages.too_long("comment", MAX_COMMENT_CHARS)
            return self.again(400, cards.Attempt(error, values, comment))
        try:
            edited = forms.edits(self.view.tool, item.args, form) if decision == "approve" else None
            args_hash = form.get("argsHash") or None
            verdict = (
                Approval(edited_args=edited, comment=comment or None, args_hash=args_hash)
                if decision == "approve"
                else Denial(comment=comment or None, args_hash=args_hash)
            )
            self.engine.resolve(pending_id, verdict, self.who)
        except errors.Conflict:  # the item changed since the page was rendered: show it as it is now
            fresh = self.engine.item(pending_id, self.who)
            return self.again(409, cards.Attempt(magic_pages.CHANGED, {}, comment), fresh)
        except errors.Forbidden as exc:
            return self.again(403, cards.Attempt(str(exc), values, comment))
        except errors.InvalidInput as exc:
            return self.again(400, cards.Attempt(str(exc), values, comment))
        return _back(self.shown, pending_id)

    def answer(self) -> Response[str]:
        """Answer a question by one of its choices or in words."""
        answer = _text(self.form.get("choice") or self.form.get("answer"))
        if not answer:
            return self.again(400, cards.Attempt(magic_pages.NO_ANSWER))
        if len(answer) > MAX_ANSWER_CHARS:
            error = magic_pages.too_long("answer", MAX_ANSWER_CHARS)
            return self.again(400, cards.Attempt(error, answer=answer))
        try:
            self.engine.answer(self.item.pending_id, Reply(answer), self.who)
        except errors.Forbidden as exc:
            return self.again(403, cards.Attempt(str(exc), answer=answer))
        except errors.InvalidInput as exc:
            return self.again(400, cards.Attempt(str(exc), answer=answer))
        return _back(self.shown, self.item.pending_id)


# --- GET /inbox/static/{asset} --------------------------------------------------------------------


def static(asset: str) -> Response[str]:
    """One of the page's static files (``inbox.css``, ``inbox.js``); 404 for any other name."""
    found = render.asset(asset)
    if found is None:
        return _message(404, "Not found", "There is no such file.", "not-found")
    content_type, text = found
    return Response(status_code=200, content_type=content_type, body=text, headers=dict(render.ASSET_HEADERS))
