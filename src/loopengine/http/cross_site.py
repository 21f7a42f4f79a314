"""Requests another site's page made in a browser: refused before they change anything.

A browser sends the Basic credentials it keeps for the API's origin with requests other sites' pages
make (a form, or a ``text/plain`` POST, needs no CORS preflight), and the JSON routes read a JSON body
whatever its label. Once someone has used the conversation page (``GET /chat/{agent}``, whose script
calls the JSON routes) or the inbox, the browser holds such credentials. So a request that changes
something (any method but GET and HEAD) on an authenticated route is refused with 403
``cross_site`` when the browser says it came from elsewhere: the inbox's own check
(:func:`loopengine.channels.inbox.csrf.cross_site`: ``Sec-Fetch-Site`` other than ``same-origin``, or
an ``Origin`` that is not the API's own). A client that is no browser sends neither header and is
not affected; the inbox's form route and the public routes (magic links, Slack, Lark) make their own
checks.

The check's code is imported only for a request that carries one of those browser headers.
"""

from __future__ import annotations

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware

from loopengine.http import auth, secrets
from loopengine.http.web import HttpError

BROWSER_HEADERS = ("sec-fetch-site", "origin")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
OWN_CHECK = ("/inbox/",)
"""Routes that make the same check themselves, answering with a page of their own."""
PUBLIC_URL_ENV = "LOOPENGINE_PUBLIC_URL"
REFUSED = "refused: the browser says another site's page sent this request (Sec-Fetch-Site or Origin)"


def refuse(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response[str]:
    """Global middleware: 403 for a state-changing request another site's page sent from a browser."""
    event = app.current_event
    headers = event.headers or {}
    path = event.path
    if (
        event.http_method not in SAFE_METHODS
        and any(name in headers for name in BROWSER_HEADERS)
        and not auth.is_public(path)
        and not path.startswith(OWN_CHECK)
    ):
        from loopengine.channels.inbox import csrf

        if csrf.cross_site(headers, secrets.environ().get(PUBLIC_URL_ENV) or "") is not None:
            raise HttpError(403, "cross_site", REFUSED)
    response: Response[str] = next_middleware(app)
    return response
