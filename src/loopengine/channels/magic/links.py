"""Magic-link pages, as :mod:`loopengine.channels.magic.routes` describes them: show one item, decide it.

Imported by the routes on the first magic-link request (and before a SnapStart snapshot). GET
(:func:`show`) renders and never changes anything, not even a due expiry; POST (:func:`decide`)
decides through ``Engine.resolve`` / ``Engine.answer``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from loopengine.app.engine import Engine
from loopengine.app.request.items import ItemView
from loopengine.app.request.resolution import Decider
from loopengine.authoring.tools import Tool
from loopengine.channels.magic import form as forms
from loopengine.channels.magic import pages
from loopengine.channels.magic.token import (
    CHANNEL,
    SECRET_ENV,
    InvalidMagicLink,
    MagicClaims,
    MagicLinkReason,
    verify_token,
)
from loopengine.domain.base import errors
from loopengine.domain.base.limits import MAX_ANSWER_CHARS, MAX_COMMENT_CHARS, MAX_FORM_FIELDS
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint
from loopengine.domain.decisions import Approval, Denial, Reply
from loopengine.domain.principals import typed
from loopengine.http import root, secrets, web
from loopengine.http.observability import logger

_Stop = web.Stop


def _html(status: int, document: str) -> Response[str]:
    """``document`` as an HTML reply, with the pages' security headers."""
    content_type = "text/html; charset=utf-8"
    return Response(status_code=status, content_type=content_type, body=document, headers=dict(pages.HEADERS))


def _message(status: int, msg: pages.Message) -> Response[str]:
    return _html(status, pages.message(msg))


def show(token: str) -> Response[str]:
    """Render the pending item behind ``token`` (or what became of it); changes nothing (never settles)."""
    return _guarded(lambda: _show(token))


def decide(token: str, event: BaseProxyEvent) -> Response[str]:
    """Decide the pending item behind ``token`` from the form ``event`` carries."""
    return _guarded(lambda: _decide(token, event))


def _guarded(run: Callable[[], Response[str]]) -> Response[str]:
    """Turn every failure into a page: bad input is a 4xx page, never a 500 or a stack trace."""
    return web.guarded(run, "magic link", _failed, _refused, unavailable=None)


def _failed(status: int) -> Response[str]:
    return _message(status, pages.failure(status))


def _refused(status: int, why: str) -> Response[str]:
    return _message(status, pages.cannot_handle(why))


@dataclass(frozen=True, slots=True)
class _Context:
    """A verified token and what it points at."""

    engine: Engine
    claims: MagicClaims
    view: ItemView

    @property
    def pending_id(self) -> str:
        return self.claims.pending_id

    @property
    def cp(self) -> TurnCheckpoint | None:
        return self.view.checkpoint

    def open_item(self) -> PendingItem | None:
        """The item if it is still waiting for a decision (and not past its deadline)."""
        return self.view.item

    def tool(self, name: str) -> Tool | None:
        """The tool as the turn's config snapshot describes it (None when unavailable)."""
        return self.view.tool

    def reload(self, settle: bool = False) -> _Context:
        """The same token, with the item read again (``settle``: record a due expiry first)."""
        return _load(self.engine, self.claims, settle)


def _context(token: str) -> _Context:
    secret = secrets.environ().get(SECRET_ENV, "")
    if not secret:
        raise _Stop(_message(404, pages.DISABLED))
    engine = root.engine()
    try:
        claims = verify_token(secret, token, engine.now())
    except InvalidMagicLink as exc:
        if exc.reason is MagicLinkReason.EXPIRED:
            raise _Stop(_message(410, pages.LINK_EXPIRED)) from None
        raise _Stop(_message(400, pages.INVALID_LINK)) from None
    logger.set_correlation_id(claims.pending_id)
    return _load(engine, claims)


def _load(engine: Engine, claims: MagicClaims, settle: bool = False) -> _Context:
    return _Context(engine, claims, engine.item(claims.pending_id, settle=settle))


def _closed_page(ctx: _Context) -> Response[str]:
    return _html(200, pages.closed(forms.closed_state(ctx.view.fate)))


def _approval(
    ctx: _Context,
    item: PendingItem,
    values: Mapping[str, str] | None = None,
    status: int = 200,
    error: str | None = None,
    comment: str = "",
) -> Response[str]:
    tool = ctx.tool(item.tool)
    values = forms.initial_values(tool, item.args) if values is None else values
    page = pages.approval_form(ctx.cp, item, tool, ctx.claims.recipient, values, error, comment)
    return _html(status, page)


def _question(
    ctx: _Context, item: PendingItem, status: int = 200, error: str | None = None, answer: str = ""
) -> Response[str]:
    return _html(status, pages.question_form(ctx.cp, item, ctx.claims.recipient, error, answer))


def _recipient(ctx: _Context) -> Decider:
    """The link's recipient: ``email:<recipient>``, scoped to the one item the link was sent for.

    The recipient is text, never parsed for a kind: one written ``group:x`` is ``email:group:x``.
    """
    return Decider(typed("email", ctx.claims.recipient), CHANNEL, kind="email", pending_id=ctx.pending_id)


def _check_approver(ctx: _Context, item: PendingItem) -> None:
    if not _recipient(ctx).may_approve(item.approvers):
        raise _Stop(_message(403, pages.not_an_approver(item.approvers, ctx.claims.recipient)))


def _show(token: str) -> Response[str]:
    ctx = _context(token)
    item = ctx.open_item()
    if item is None:
        return _closed_page(ctx)
    _check_approver(ctx, item)
    return _question(ctx, item) if item.kind == "question" else _approval(ctx, item)


def _form(event: Any) -> dict[str, str]:
    try:
        return web.form_body(event, MAX_FORM_FIELDS)
    except web.HttpError:  # the only one form_body raises is 413
        raise _Stop(_message(413, pages.too_large(web.MAX_BODY_BYTES))) from None
    except errors.InvalidInput:  # not UTF-8, lone surrogates, too many fields
        raise _Stop(_message(400, pages.BAD_FORM)) from None


def _decide(token: str, event: BaseProxyEvent) -> Response[str]:
    ctx = _context(token)
    form = _form(event)
    item = ctx.open_item()
    if item is None:  # a POST settles a due expiry (app/request/expiry.py); a GET never does
        return _closed_page(ctx.reload(settle=True))
    _check_approver(ctx, item)
    if item.kind == "question":
        return _decide_question(ctx, item, form)
    comment = form.get("comment", "").replace("\r\n", "\n").strip()
    values = {**forms.initial_values(ctx.tool(item.tool), item.args), **forms.submitted_values(form)}
    decision = form.get("decision")
    if decision not in ("approve", "deny"):
        return _approval(ctx, item, values, 400, pages.CHOOSE_DECISION, comment)
    if len(comment) > MAX_COMMENT_CHARS:
        return _approval(ctx, item, values, 400, pages.too_long("comment", MAX_COMMENT_CHARS), comment)
    try:
        edited = forms.edits(ctx.tool(item.tool), item.args, form) if decision == "approve" else None
        who = _recipient(ctx)
        args_hash = form.get("argsHash") or None
        verdict = (
            Approval(edited_args=edited, comment=comment or None, args_hash=args_hash)
            if decision == "approve"
            else Denial(comment=comment or None, args_hash=args_hash)
        )
        res = ctx.engine.resolve(ctx.pending_id, verdict, who)
    except errors.Conflict:
        fresh = ctx.reload()
        current = fresh.open_item()
        if current is None:
            return _closed_page(fresh)
        return _approval(fresh, current, None, 409, pages.CHANGED, comment)
    except errors.Forbidden as exc:
        return _message(403, pages.not_yours(str(exc)))
    except errors.InvalidInput as exc:
        return _approval(ctx, item, values, 400, str(exc), comment)
    if res.already_resolved:
        return _closed_page(ctx.reload())
    if res.denied:
        return _html(200, pages.denied(comment))
    return _html(200, pages.approved(item, edited, res.outstanding, comment))


def _decide_question(ctx: _Context, item: PendingItem, form: Mapping[str, str]) -> Response[str]:
    answer = (form.get("choice") or form.get("answer") or "").replace("\r\n", "\n").strip()
    if not answer:
        return _question(ctx, item, 400, pages.NO_ANSWER)
    if len(answer) > MAX_ANSWER_CHARS:
        return _question(ctx, item, 400, pages.too_long("answer", MAX_ANSWER_CHARS), answer)
    try:
        res = ctx.engine.answer(ctx.pending_id, Reply(answer), _recipient(ctx))
    except errors.InvalidInput as exc:
        return _question(ctx, item, 400, str(exc), answer)
    if res.already_resolved:
        return _closed_page(ctx.reload())
    return _html(200, pages.answered(answer, res.outstanding))
