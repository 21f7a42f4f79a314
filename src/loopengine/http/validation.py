"""Powertools' request validation, with the house rules in front of it and the house error shape.

``APIGatewayHttpResolver(enable_validation=True)`` validates every route's path, query and body
against its pydantic models (:mod:`loopengine.app.api_models`) and checks each response against its
return annotation. Two things it does not do on its own, done here:

- **Order.** Powertools runs its request validation *before* any ``app.use`` middleware, so a
  stranger's bad body would get a 400 instead of the 401 (deny by default), and Powertools'
  ``json.loads`` would see hostile JSON first. :class:`GuardedValidation` takes its place and runs
  the guards (auth, then the edge's path/query hygiene) first; the body of a route that takes one
  is read through :func:`loopengine.http.web.json_body` (413, strict UTF-8, depth, finite numbers,
  ``bad_json``), whatever content type the client labelled it with (``curl -d`` says form).
- **Error shape.** :func:`invalid_request` answers DESIGN.md's 400 ``{"error": "invalid_input",
  "message"}`` naming the field, never Powertools' 422; an id in the path not in the product's
  format is 404 ``not_found`` (a typo is not a request).

Powertools has no public way to run a middleware before its request validation, nor to parse the
body, so the order rests on two private hooks: the resolver's ``_request_validation_middleware``
slot (the middleware every validated route runs first) and the middleware's ``_get_body``.
pyproject.toml therefore pins aws-lambda-powertools to the tested range, tests/test_powertools_pin.py
fails on a release that drops or changes either hook, and :func:`resolver` refuses to build an app
(rather than serve routes without their guards) when the slot is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any
from urllib.parse import unquote_plus

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.middlewares.openapi_validation import (
    OpenAPIRequestValidationMiddleware,
)
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Query

from loopengine.app import api_models as m
from loopengine.domain.base import ids
from loopengine.http import web

TenantQuery = Annotated[
    str | None, Query(pattern=m.TENANT_PATTERN, description="the tenant to read (default: the caller's)")
]
"""``?tenant=``, as the routes that read a caller's tenants take it."""
AgentQuery = Annotated[str | None, Query(pattern=m.AGENT_PATTERN, description="only this agent's")]
"""``?agent=``: an agent's name."""

Guard = Callable[[APIGatewayHttpResolver, NextMiddleware], Response[str]]
Step = Callable[[Any], Response[Any]]

CLIENT_ID_RULE = (
    f"must be 1-{ids.MAX_CLIENT_ID_CHARS} characters: a letter or digit, then letters, digits or _ . : @ -"
)
PATTERN_RULES = {
    "sessionId": CLIENT_ID_RULE,
    "tenant": CLIENT_ID_RULE,
    "agent": "must be an agent name: letters, digits, _ and -",
    "message": "must not be blank",
    "answer": "must not be blank",
}
"""What a pattern means, said in words (pydantic would quote the regular expression)."""
PATH_WHAT = {"pendingId": "pending item", "turnId": "turn", "sessionId": "session", "agent": "agent"}
SLOT = "_request_validation_middleware"
"""The resolver's private attribute holding the middleware Powertools runs first on a validated route."""


class GuardedValidation(OpenAPIRequestValidationMiddleware):
    """Powertools' request validation, run after ``guards`` and on a strictly parsed body."""

    def __init__(self, guards: Sequence[Guard]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.guards = tuple(guards)

    def handler(self, app: Any, next_middleware: NextMiddleware) -> Response[Any]:
        """Run the guards in order, then validate, then the route."""

        def validate(at: Any) -> Response[Any]:
            return super(GuardedValidation, self).handler(at, next_middleware)

        step: Step = validate
        for guard in reversed(self.guards):
            step = _bind(guard, step)
        return step(app)

    def _get_body(self, app: Any) -> dict[str, Any]:
        """The body as strict JSON (DESIGN.md input hygiene), before the model sees it."""
        return web.json_body(app.current_event)


def _bind(guard: Guard, then: Step) -> Step:
    def step(app: Any) -> Response[Any]:
        return guard(app, then)  # type: ignore[arg-type]

    return step


def single_query_values(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response[Any]:
    """Guard: a query parameter given twice (``?tenant=a&tenant=b``) is ambiguous, so 400 ``invalid_input``.

    API Gateway joins repeated values with commas and a model would see only one of them: which
    tenant the caller meant is not for the server to guess.
    """
    raw = app.current_event.raw_query_string or ""
    names = [unquote_plus(part.split("=", 1)[0]) for part in raw.split("&") if part]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        shown = ", ".join(repr(n[:40]) for n in repeated[:3])
        raise web.HttpError(400, "invalid_input", f"query parameter {shown} given more than once")
    response: Response[Any] = next_middleware(app)
    return response


def resolver(guards: Sequence[Guard]) -> APIGatewayHttpResolver:
    """An HTTP API resolver that validates every route, the ``guards`` in front of everything."""
    app = APIGatewayHttpResolver(enable_validation=True, response_validation_error_http_code=500)
    if not isinstance(getattr(app, SLOT, None), OpenAPIRequestValidationMiddleware):
        # deny by default: without the slot the guards (auth first) would silently never run
        raise RuntimeError(
            f"this aws-lambda-powertools has no {SLOT}: loopengine cannot put its guards before "
            "validation; install the version pyproject.toml pins"
        )
    setattr(app, SLOT, GuardedValidation(guards))  # the slot Powertools runs first
    app.exception_handler(RequestValidationError)(invalid_request)
    return app


def invalid_request(exc: RequestValidationError) -> Response[str]:
    """400 ``invalid_input`` naming the field; 404 ``not_found`` for an id of the wrong form."""
    errors = list(exc.errors())
    for err in errors:
        loc = [str(part) for part in err.get("loc", ())]
        if loc[:1] == ["path"] and len(loc) > 1:
            what = PATH_WHAT.get(loc[1], loc[1])
            return web.reply(404, {"error": "not_found", "message": f"no {what} of that form"})
    shown = "; ".join(_describe(err) for err in errors[:3])
    return web.reply(400, {"error": "invalid_input", "message": shown or "invalid request"})


def _describe(err: dict[str, Any]) -> str:
    loc = [str(part) for part in err.get("loc", ())]
    where = {"body": "request body", "query": "query parameter"}.get(loc[0], loc[0]) if loc else "request"
    field = ".".join(loc[1:])
    msg = str(err.get("msg") or err.get("type") or "invalid")
    if err.get("type") == "string_pattern_mismatch" and loc and loc[-1] in PATTERN_RULES:
        msg = PATTERN_RULES[loc[-1]]
    return f"{field}: {msg}" if field else f"{where}: {msg}"
