"""The ``api`` Lambda: every route of DESIGN.md's HTTP API (API Gateway HTTP API, payload 2.0).

Thin by design: parse, call the engine, reply. Errors map to status codes in ``web.STATUS``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.utilities.typing import LambdaContext

from handlers import auth, root, web
from handlers.magic import router as magic_router
from handlers.observability import flush, logger, tracer
from handlers.slack import router as slack_router
from loopengine import ids, views
from loopengine.errors import LoopengineError

app = APIGatewayHttpResolver()
app.use([auth.middleware, web.edge])  # deny by default (auth.PUBLIC aside), then input hygiene
app.include_router(magic_router)
app.include_router(slack_router)
API_BUDGET_SECONDS = 25.0  # API Gateway cuts requests at 30 s; LOOPENGINE_API_BUDGET_SECONDS lowers it
MAX_WAIT_SECONDS = 25.0
MAX_SEQ = 1e12


@app.get("/health")
def health() -> Response[str]:
    return web.reply(200, {"status": "ok"})


@app.post("/agents/<agent>/messages")
def post_message(agent: str) -> Response[str]:
    sender = auth.current(app)
    body = web.json_body(app.current_event)
    _client_id(body, "sessionId", ids.is_session_id)
    _client_id(body, "tenant", ids.is_tenant)
    live = body.get("live", False)
    if not isinstance(live, bool):
        raise web.HttpError(400, "invalid_input", "live must be true or false")
    out = root.engine().send_message(
        agent,
        body.get("message"),
        session_id=body.get("sessionId") or None,
        tenant=body.get("tenant") or None,
        budget_seconds=_budget(),
        sender=sender,
        remaining_seconds=_remaining(),
        live=live,
    )
    logger.set_correlation_id(out.turn_id)
    return web.reply(*views.turn_outcome(out))


@app.post("/pending-approvals/<pending_id>/resolve")
def resolve(pending_id: str) -> Response[str]:
    who = auth.current(app)
    web.path_id(pending_id, ids.is_pending_id, "pending item")
    body = web.json_body(app.current_event)
    wait = web.query_float(app.current_event, "wait", 0, MAX_WAIT_SECONDS)
    logger.set_correlation_id(pending_id)
    res = root.engine().resolve(
        pending_id,
        body.get("decision"),
        who,
        edited_args=body.get("editedArgs"),
        comment=body.get("comment"),
        args_hash=body.get("argsHash"),
        scope=body.get("scope"),
    )
    return _resolution(res, wait)


@app.post("/pending-questions/<pending_id>/answer")
def answer(pending_id: str) -> Response[str]:
    who = auth.current(app)
    web.path_id(pending_id, ids.is_pending_id, "pending item")
    body = web.json_body(app.current_event)
    wait = web.query_float(app.current_event, "wait", 0, MAX_WAIT_SECONDS)
    logger.set_correlation_id(pending_id)
    return _resolution(root.engine().answer(pending_id, body.get("answer"), who), wait)


@app.get("/pending-approvals")
def list_pending() -> Response[str]:
    who = auth.current(app)
    query = app.current_event.query_string_parameters or {}
    items = root.engine().open_items(agent=query.get("agent"), tenant=query.get("tenant"), who=who)
    return web.reply(200, {"items": items})


@app.get("/turns/<turn_id>")
def get_turn(turn_id: str) -> Response[str]:
    who = auth.current(app)
    web.path_id(turn_id, ids.is_turn_id, "turn")
    engine = root.engine()
    turn = engine.turn(turn_id, who)
    return web.reply(200, views.turn_view(turn, engine.outcome(turn_id), engine.audit(turn_id, who)))


@app.get("/turns/<turn_id>/events")
def turn_events(turn_id: str) -> Response[str]:
    who = auth.current(app)
    web.path_id(turn_id, ids.is_turn_id, "turn")
    after = web.query_float(app.current_event, "after", 0, MAX_SEQ)
    wait = web.query_float(app.current_event, "wait", 0, MAX_WAIT_SECONDS)
    if after is not None and not after.is_integer():
        raise web.HttpError(400, "bad_query", "after must be a whole number (an event's seq)")
    found = root.engine().events(turn_id, int(after or 0), wait or 0.0, who)
    return web.reply(200, views.turn_events(*found))


@app.post("/turns/<turn_id>/cancel")
def cancel_turn(turn_id: str) -> Response[str]:
    who = auth.current(app)
    web.path_id(turn_id, ids.is_turn_id, "turn")
    logger.set_correlation_id(turn_id)
    return web.reply(*views.cancelled(root.engine().cancel(turn_id, who)))


@app.get("/sessions/<session_id>")
def get_session(session_id: str) -> Response[str]:
    who = auth.current(app)
    web.path_id(session_id, ids.is_session_id, "session")
    return web.reply(200, views.session_view(session_id, root.engine().history(session_id, who)))


@app.not_found
def not_found(_exc: Exception) -> Response[str]:
    path = app.current_event.raw_path
    return web.reply(
        404, {"error": "not_found", "message": f"no route {app.current_event.http_method} {path}"}
    )


@app.exception_handler(Exception)  # type: ignore[untyped-decorator]
def on_error(exc: Exception) -> Response[str]:
    if not isinstance(exc, web.HttpError | LoopengineError):
        logger.exception("unhandled error")
    return web.error_reply(exc)


def _resolution(res: Any, wait: float | None) -> Response[str]:
    if wait and not res.already_resolved and res.outstanding == 0 and not res.denied:
        out = root.engine().wait(res.turn_id, wait)
        return web.reply(*views.turn_outcome(out))
    return web.reply(*views.resolution(res))


def _remaining() -> float | None:
    remaining = getattr(app.lambda_context, "get_remaining_time_in_millis", None)
    return remaining() / 1000 if remaining is not None else None


def _client_id(body: dict[str, Any], key: str, valid: Callable[[object], bool]) -> None:
    """400 naming ``key`` when the client's own id is present but not of the accepted form."""
    value = body.get(key)
    if value is None or value == "":
        return
    if not isinstance(value, str):
        raise web.HttpError(400, "invalid_input", f"{key} must be a string")
    if not valid(value):
        raise web.HttpError(
            400,
            "invalid_input",
            f"{key} must be 1-{ids.MAX_CLIENT_ID_CHARS} characters: a letter or digit, then letters, "
            "digits or _ . : @ -",
        )


def _budget() -> float:
    try:
        budget = min(
            API_BUDGET_SECONDS, float(os.environ.get("LOOPENGINE_API_BUDGET_SECONDS") or API_BUDGET_SECONDS)
        )
    except ValueError:
        budget = API_BUDGET_SECONDS
    left = _remaining()
    return max(0.0, budget if left is None else min(budget, left - 4.0))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point."""
    try:
        return app.resolve(event, context)
    finally:
        flush()
