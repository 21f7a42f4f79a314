"""The ``api`` Lambda: every route of DESIGN.md's HTTP API (API Gateway HTTP API, payload 2.0).

Thin by design: parse, call the engine, reply. The routes live in small routers; Powertools
validates requests and responses against :mod:`loopengine.app.api_models` (:mod:`loopengine.http.validation`
puts auth and input hygiene in front of that), and errors map to status codes in ``web.STATUS``.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.utilities.typing import LambdaContext

from loopengine.app import api_models as m
from loopengine.channels.chat import routes as routes_chat
from loopengine.channels.inbox import routes as routes_inbox
from loopengine.channels.lark.routes import router as lark_router
from loopengine.channels.magic.routes import router as magic_router
from loopengine.channels.slack.routes import router as slack_router
from loopengine.domain.base.errors import LoopengineError
from loopengine.http import auth, cross_site, openapi, routes_pending, routes_turns, validation, web
from loopengine.http.observability import flush, logger
from loopengine.http.routes_usage import router as usage_router

# deny by default (auth.PUBLIC aside), no other site's page, then input hygiene, then Powertools
# validates against the models
app = validation.resolver([auth.middleware, cross_site.refuse, web.edge, validation.single_query_values])
for router in (
    routes_turns.router,
    routes_pending.router,
    openapi.router,
    magic_router,
    slack_router,
    lark_router,
    routes_inbox.router,
    usage_router,
    routes_chat.router,
):
    app.include_router(router)


@app.get(
    "/health",
    summary="Liveness",
    security=openapi.PUBLIC,
    responses=openapi.answers({200: m.Health}, public=True),
)
def health() -> Response[m.Health]:
    return web.reply(200, {"status": "ok"})


@app.not_found
def not_found(_exc: Exception) -> Response[Any]:
    path = app.current_event.raw_path
    return web.reply(
        404, {"error": "not_found", "message": f"no route {app.current_event.http_method} {path}"}
    )


@app.exception_handler(Exception)  # type: ignore[untyped-decorator]
def on_error(exc: Exception) -> Response[Any]:
    if not isinstance(exc, web.HttpError | LoopengineError):
        logger.exception("unhandled error")
    event = app.current_event
    answer = routes_inbox.challenge(event.path, web.error_reply(exc))
    return routes_chat.challenge(event.path, event.headers or {}, answer)


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point."""
    try:
        return app.resolve(event, context)
    finally:
        flush()
