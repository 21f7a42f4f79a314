"""The conversation page, as :mod:`loopengine.channels.chat.routes` describes it: the page and its files.

Imported by the routes on the first chat request (and before a SnapStart snapshot). The routes resolve
the signed-in principal first (401 and the browser's login prompt before anything here runs); every
failure here is a page, never a 500 or a stack trace. Everything is read through the
:class:`~loopengine.app.engine.Engine` as that principal: the session's history and turns within the
caller's tenant (another tenant's session is another session: 404), each open item through
:meth:`~loopengine.app.engine.Engine.item`, its card the inbox's
(:func:`loopengine.channels.inbox.cards.card`) with the magic-link form's controls.
"""

from __future__ import annotations

from collections.abc import Callable

from aws_lambda_powertools.event_handler import Response

from loopengine.app.engine import Engine
from loopengine.app.request import sessions
from loopengine.channels.chat import render, routes
from loopengine.channels.chat import thread as threads
from loopengine.channels.inbox import cards
from loopengine.channels.magic import pages as magic_pages
from loopengine.domain.base import errors, ids
from loopengine.domain.principals import Principal
from loopengine.http import root as roots
from loopengine.http import web

HTML = "text/html; charset=utf-8"
NO_SESSION = "There is no such conversation with this agent (or it is not yours to see)."


def _html(status: int, document: str) -> Response[str]:
    return Response(status_code=status, content_type=HTML, body=document, headers=dict(render.HEADERS))


def _message(
    status: int, title: str, text: str, state: str = "error", back: str | None = None
) -> Response[str]:
    return _html(status, render.message(title, text, state, back))


def _guarded(run: Callable[[], Response[str]], back: str | None) -> Response[str]:
    """Every failure as a page: bad input is a 4xx page, never a 500 or a stack trace."""

    def refused(status: int, why: str) -> Response[str]:
        return _message(status, "This cannot be shown", why, "not-found" if status == 404 else "error", back)

    return web.guarded(run, "chat", _failed, refused)


def _failed(status: int) -> Response[str]:
    msg = magic_pages.failure(status)
    return _message(status, msg.title, msg.text)


def show(who: Principal, agent: str, session_id: str | None, tenant: str | None) -> Response[str]:
    """The conversation page (changes nothing)."""
    back = render.page_url(agent, None, tenant) if session_id is not None else None
    return _guarded(lambda: _show(who, agent, session_id, tenant), back)


def _show(who: Principal, agent: str, session_id: str | None, tenant: str | None) -> Response[str]:
    engine = roots.engine()
    engine.agent(agent)  # NotFound (404) for no such agent, AgentUnavailable (503) for a broken one
    scope = sessions.tenant_for(who, tenant)  # 403 outside the caller's tenants; 400 if one must be named
    thread = threads.Thread(())
    if session_id is not None:
        thread = _thread(engine, who, agent, session_id, scope)
    page = render.Page(
        who=who.id,
        agent=agent,
        tenant=tenant,
        tenant_label=cards.tenant_label(scope),
        session_id=session_id,
        thread=thread,
    )
    return _html(200, render.chat(page))


def _thread(engine: Engine, who: Principal, agent: str, session_id: str, scope: str) -> threads.Thread:
    """The session's thread as ``who`` may see it (NotFound: not a session of ``agent`` in ``scope``)."""
    if not ids.is_session_id(session_id):
        raise errors.NotFound(NO_SESSION)
    try:
        messages = engine.history(session_id, who, scope)
    except errors.NotFound:
        raise errors.NotFound(NO_SESSION) from None
    turns = engine.session_turns(session_id, who, scope)
    if not turns or turns[0].agent != agent:  # another agent's conversation: not this page's
        raise errors.NotFound(NO_SESSION)
    first_audited = len(turns) - routes.MAX_AUDITED_TURNS
    reads = [
        threads.TurnRead(t, engine.audit(t.turn_id, who) if n >= first_audited else None)
        for n, t in enumerate(turns)
    ]
    found: dict[str, threads.OpenCard] = {}
    now = engine.now()
    for pending_id in threads.open_pending(reads[-1]):
        view = engine.item(pending_id, who)
        card = cards.card(view, who, now, token="")
        if card is not None and view.item is not None:
            found[pending_id] = threads.open_card(card, view.tool, view.item.args)
    return threads.build(messages, reads, found)


def static(asset: str, asked_version: str | None) -> Response[str]:
    """One of the chat's static files; 404 for any other name."""
    found = render.asset(asset)
    if found is None:
        return _message(404, "Not found", "There is no such file.", "not-found")
    content_type, text = found
    headers = dict(render.asset_headers(asset, asked_version))
    return Response(status_code=200, content_type=content_type, body=text, headers=headers)
