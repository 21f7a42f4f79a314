"""Magic-link pages: ``GET /magic/{token}`` shows one pending item, ``POST /magic/{token}`` decides it.

The token (:mod:`~loopengine.channels.magic.token`) is the only credential: it names one pendingId and
the recipient
it was sent to, who is recorded as ``decidedBy`` with channel ``magic-link``. GET never changes
anything (mail scanners and link previews fetch links): it renders the item, its arguments as a
form where the tool's schema allows editing (:mod:`loopengine.channels.magic.form`), or what became of it.
POST decides through the same ``Engine.resolve`` / ``Engine.answer`` the JSON routes use.

Every reply is a small self-contained HTML page (:mod:`loopengine.channels.magic.pages`) with headers that
keep it out of caches, referrers and frames. Errors are handled here, as pages, so the api's JSON
error handlers never see them; bad input is never a 500.

This module declares the routes; the pages and decisions are :mod:`loopengine.channels.magic.links`,
imported by the first magic-link request (or before a SnapStart snapshot), so the api's cold start
and its other routes never load the magic-link code.
"""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from loopengine.http import openapi

router = Router()  # type: ignore[no-untyped-call]


@router.get(
    "/magic/<token>",
    summary="Magic link: the confirm page (changes nothing)",
    security=openapi.PUBLIC,
    responses=openapi.pages(200, 400, 404, 410, 503),
)
def show(token: str) -> Response[str]:
    """Render the pending item behind ``token`` (or what became of it); changes nothing."""
    from loopengine.channels.magic import links as magic_links  # loaded by the first magic-link request

    return magic_links.show(token)


@router.post(
    "/magic/<token>",
    summary="Magic link: decide from the submitted form",
    security=openapi.PUBLIC,
    responses=openapi.pages(200, 400, 403, 404, 410, 413, 503),
)
def decide(token: str) -> Response[str]:
    """Decide the pending item behind ``token`` from the submitted form."""
    from loopengine.channels.magic import links as magic_links

    return magic_links.decide(token, router.current_event)
