"""The approvals inbox: ``GET /inbox`` lists every open item of the caller's tenants; a form decides one.

Same auth as the rest of the API (the middleware has resolved the principal before a route runs:
Basic or JWT, deny by default); a browser that gets the 401 is asked for Basic credentials. The
listing is :meth:`~loopengine.app.engine.Engine.open_items` (the caller's tenants, one at a time) and
each item is read through :meth:`~loopengine.app.engine.Engine.item`, so another tenant's item is
404 everywhere here, as in the JSON API.

``POST /inbox/items/{pendingId}`` decides through the same ``Engine.resolve`` / ``Engine.answer`` the
JSON routes use, as the signed-in principal via channel ``inbox``. Because the browser sends saved
credentials with any request, a post must also pass the cross-site checks
(:mod:`loopengine.channels.inbox.csrf`): not cross-site by ``Sec-Fetch-Site`` / ``Origin``, and the
form token the page issued for this principal and this item (403 otherwise, nothing decided). A
decision, or a click on an item that closed meanwhile, answers 303 back to the inbox, whose flash
says what became of the item and who decided it (:func:`loopengine.domain.fate.item_fate`); a
refused one (a bad edit, not an approver, the item changed) shows the inbox again with the item
first and why, nothing decided.

``GET /inbox/static/{asset}`` serves the page's stylesheet and script (no inline code anywhere).

This module declares the routes; the pages and decisions are :mod:`loopengine.channels.inbox.pages`,
imported by the first inbox request (or before a SnapStart snapshot), so the api's cold start and its
other routes never load the inbox's code.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from loopengine.app import api_models as m
from loopengine.http import auth, openapi

router = Router()  # type: ignore[no-untyped-call]

MAX_ITEMS = 50
"""Items one page shows (each is one item read); the rest are counted, and a filter narrows them."""
MAX_FOLLOWED = 3
"""Turns the page's script follows at once (each holds a connection; the list poll covers the rest)."""
PUBLIC_URL_ENV = "LOOPENGINE_PUBLIC_URL"
PAGE_PATH = "/inbox"
"""The inbox page (``channels.inbox.render.PAGE_PATH``, the links the page makes, is the same)."""


def challenge(path: str, response: Response[Any]) -> Response[Any]:
    """``response`` with a Basic challenge when it is a 401 for an inbox page, so a browser asks for login."""
    return auth.challenge(response, path == PAGE_PATH or path.startswith(PAGE_PATH + "/"))


REDIRECT: OpenAPIResponse = {
    "description": "decided, or already closed: back to the inbox, whose flash says what became of the item",
    "headers": {"Location": {"description": "/inbox?item=<pendingId>", "schema": {"type": "string"}}},
    "content": {"text/html": {"schema": {"type": "string", "maxLength": 0}}},
}
Tenant = Annotated[str | None, Query(pattern=m.TENANT_PATTERN, description="only this tenant's items")]
Agent = Annotated[str | None, Query(pattern=m.AGENT_PATTERN, description="only this agent's items")]
Item = Annotated[
    str | None, Query(pattern=m.PENDING_ID_PATTERN, description="say what became of this item (after a post)")
]


@router.get(
    PAGE_PATH,
    summary="The approvals inbox: every open item of the caller's tenants (HTML)",
    responses=openapi.page_answers((200, 403, 503), (400,)),
)
def show(tenant: Tenant = None, agent: Agent = None, item: Item = None) -> Response[str]:
    """The inbox page (changes nothing)."""
    who = auth.current(router)  # 401 (and the browser's login prompt) before anything else
    from loopengine.channels.inbox import (
        pages as inbox_pages,  # the inbox's code: loaded by the first inbox request
    )

    return inbox_pages.show(who, tenant, agent, item)


@router.post(
    PAGE_PATH + "/items/<pendingId>",
    summary="The inbox: approve, deny, edit or answer one item (a form post from the inbox page)",
    responses=openapi.page_answers((400, 403, 404, 409, 413, 503), (), **{"303": REDIRECT}),
)
def decide(pending_id: Annotated[str, Path(alias="pendingId", description="pnd_ + 32 hex")]) -> Response[str]:
    """Decide one item from the inbox's form, as the signed-in principal."""
    who = auth.current(router)
    from loopengine.channels.inbox import pages as inbox_pages

    return inbox_pages.decide(who, pending_id, router.current_event)


@router.get(
    PAGE_PATH + "/static/<asset>",
    summary="The inbox page's stylesheet and script",
    responses=openapi.static_answers("the page's stylesheet or script"),
)
def static(asset: str, v: openapi.AssetVersion = None) -> Response[str]:
    """One of the page's static files (``inbox.css``, ``inbox.js``); 404 for any other name."""
    from loopengine.channels.inbox import pages as inbox_pages

    return inbox_pages.static(asset)
