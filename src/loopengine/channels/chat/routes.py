"""The conversation in the browser: ``GET /chat/{agent}`` (``?session=<id>`` continues one) and its files.

Same auth as the rest of the API (the middleware has resolved the principal before a route runs: Basic
or JWT, deny by default); a browser that gets the 401 is asked for Basic credentials
(:func:`challenge`). The page changes nothing: it shows the session's thread (its history, each call
that waited for a human and what became of it, any card still open) and its script sends messages and
decisions through the JSON routes with the client module (``GET /chat/static/loopengine-client.js``),
as the signed-in principal. Another tenant's session is 404, as in the JSON API.

This module declares the routes; the page is :mod:`loopengine.channels.chat.pages`, imported by the
first chat request (or before a SnapStart snapshot), so the api's cold start and its other routes never
load the chat's code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from loopengine.app import api_models as m
from loopengine.http import auth, openapi

router = Router()  # type: ignore[no-untyped-call]

PAGE_PATH = "/chat"
"""The page is ``/chat/{agent}`` (``channels.chat.render.PAGE_PATH`` is the same, with its slash)."""
CHANNEL = "chat"
"""What the page's script declares in ``X-Loopengine-Channel`` (kept in the audit as ``declaredChannel``)."""
MAX_AUDITED_TURNS = 10
"""The session's latest turns whose audit the page reads (older calls show their outcome only)."""


def challenge(path: str, headers: Mapping[str, str], response: Response[Any]) -> Response[Any]:
    """``response`` with a Basic challenge when it is a 401 for the chat: its page, or the page's script.

    The browser logged in on ``/chat/{agent}`` keeps the credentials for paths under ``/chat/`` only, so
    its first call to a JSON route goes without them; the challenge on that 401 (for a request that
    declares ``X-Loopengine-Channel: chat``, as the page's script does) makes it send them again.
    """
    page = path.startswith(PAGE_PATH + "/")
    return auth.challenge(response, page or headers.get(auth.CHANNEL_HEADER) == CHANNEL)


Agent = Annotated[
    str, Path(pattern=m.AGENT_PATTERN, description="the agent's name", examples=["customer-service"])
]
Session = Annotated[
    str | None,
    Query(pattern=m.CLIENT_ID_PATTERN, description="continue this conversation (its sessionId)"),
]
Tenant = Annotated[
    str | None,
    Query(
        pattern=m.TENANT_PATTERN, description="the tenant to talk in (default: the caller's, as a message)"
    ),
]


def _either(status: int) -> OpenAPIResponse:
    """A status the route answers as JSON (a malformed query) or as a page (what the page refuses)."""
    json_answer, page = openapi.answers({}, status)[status], openapi.pages(status)[status]
    return {
        "description": json_answer["description"],
        "content": {**json_answer["content"], **page["content"]},
    }


@router.get(
    PAGE_PATH + "/<agent>",
    summary="The conversation with an agent in the browser: send, watch, decide its cards (HTML)",
    responses=openapi.page_answers((200, 403, 503), (), **{"400": _either(400), "404": _either(404)}),
)
def show(agent: Agent, session: Session = None, tenant: Tenant = None) -> Response[str]:
    """The conversation page (changes nothing)."""
    who = auth.current(router)  # 401 (and the browser's login prompt) before anything else
    from loopengine.channels.chat import pages  # the chat's code: loaded by the first chat request

    return pages.show(who, agent, session, tenant)


@router.get(
    PAGE_PATH + "/static/<asset>",
    summary="The conversation page's stylesheet and script, and the client module (loopengine-client.js)",
    responses=openapi.static_answers(
        "the page's stylesheet, its script, or the client module for any frontend"
    ),
)
def static(asset: str, v: openapi.AssetVersion = None) -> Response[str]:
    """One of the chat's static files (``chat.css``, ``chat.js``, ``loopengine-client.js``); 404 otherwise."""
    from loopengine.channels.chat import pages

    return pages.static(asset, v)
