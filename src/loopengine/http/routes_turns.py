"""Routes that start and inspect turns: messages, a turn, cancel, a session's history."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query

from loopengine.app import api_models as m
from loopengine.app import views
from loopengine.domain.base import limits
from loopengine.http import auth, budget, root, web
from loopengine.http.observability import logger
from loopengine.http.openapi import answers
from loopengine.http.validation import TenantQuery

router = Router()  # type: ignore[no-untyped-call]

TurnId = Annotated[str, Path(alias="turnId", pattern=m.TURN_ID_PATTERN, description="trn_ + 32 hex")]
Agent = Annotated[
    str, Path(pattern=m.AGENT_PATTERN, description="the agent's name", examples=["customer-service"])
]
SessionId = Annotated[str, Path(alias="sessionId", pattern=m.CLIENT_ID_PATTERN)]
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]([ -~]{0,253}[!-~])?$"
"""1-255 printable ASCII characters, none at either end a space (HTTP strips those from a header)."""
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="idempotency-key",
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description=(
            "Idempotency-Key (1-255 printable characters; the Stripe convention): a retry with the same key"
            " and body answers the first request's turn as it stands now (no second turn); the same key with"
            " another body is 422 idempotency_mismatch. Scoped to tenant and agent, kept 24 h."
        ),
    ),
]

Prefer = Annotated[
    str | None,
    Header(
        alias="prefer",
        description=(
            "respond-async (RFC 7240): answer 202 running with the turnId at once and leave the turn to the"
            " worker, to follow its events while the model talks (what loopengine chat sends)"
        ),
    ),
]


@router.post(
    "/agents/<agent>/messages",
    summary="Send a message: run a turn until it finishes, pauses for a human, or runs out of budget",
    responses=answers(
        {200: m.Finished, 202: m.Paused | m.Working}, 400, 403, 404, 409, 413, 415, 422, 429, 503
    ),
)
def post_message(
    agent: Agent,
    body: Annotated[m.MessageRequest, Body()],
    idempotency_key: IdempotencyKey = None,
    prefer: Prefer = None,
) -> Response[m.TurnOutcome]:
    respond_async = "respond-async" in [p.split(";")[0].strip().lower() for p in (prefer or "").split(",")]
    engine, context = root.engine(), router.lambda_context
    out = engine.send_message(
        agent,
        body.message,
        session_id=body.sessionId or None,
        tenant=body.tenant or None,
        budget_seconds=0.0 if respond_async else budget.seconds(context, router.current_event, engine.now()),
        sender=auth.current(router),
        remaining_seconds=budget.remaining(router.lambda_context),
        live=body.live,
        idempotency_key=idempotency_key,
    )
    logger.set_correlation_id(out.turn_id)
    return web.reply(*views.turn_outcome(out))


@router.get(
    "/turns/<turnId>",
    summary="A turn: status, pending items, audit trail",
    responses=answers({200: m.TurnView}, 404),
)
def get_turn(turn_id: TurnId) -> Response[m.TurnView]:
    who, engine = auth.current(router), root.engine()
    turn = engine.turn(turn_id, who)
    return web.reply(200, views.turn_view(turn, engine.outcome(turn_id), engine.audit(turn_id, who)))


@router.get(
    "/turns/<turnId>/events",
    summary="A turn's events after a sequence number, long-polled (SSE under loopengine dev)",
    responses=answers({200: m.TurnEvents}, 400, 404, 429),
)
def turn_events(
    turn_id: TurnId,
    after: Annotated[int, Query(ge=0, le=10**9, description="the last seq seen (0: from the start)")] = 0,
    wait: Annotated[float, Query(ge=0, le=limits.MAX_WAIT_SECONDS, description="wait up to S seconds")] = 0.0,
) -> Response[m.TurnEvents]:
    engine = root.engine()
    wait = budget.wait_seconds(wait, router.current_event, engine.now())  # counted from arrival
    found = engine.events(turn_id, after, wait, auth.current(router))
    return web.reply(200, views.turn_events(*found))


@router.post(
    "/turns/<turnId>/cancel",
    summary="Stop a running or parked turn (side effects already sent are not unsaid)",
    responses=answers({200: m.Cancelled, 202: m.Cancelled}, 400, 403, 404, 415, 422),
)
def cancel_turn(turn_id: TurnId, idempotency_key: IdempotencyKey = None) -> Response[m.Cancelled]:
    logger.set_correlation_id(turn_id)
    stopped = root.engine().cancel(turn_id, auth.current(router), idempotency_key)
    return web.reply(*views.cancelled(stopped))


@router.get(
    "/sessions/<sessionId>",
    summary="A session's durable history, its compactions and usage (session ids are scoped by tenant)",
    responses=answers({200: m.SessionView}, 400, 403, 404),
)
def get_session(session_id: SessionId, tenant: TenantQuery = None) -> Response[m.SessionView]:
    who, engine = auth.current(router), root.engine()
    history = engine.history(session_id, who, tenant)
    compactions, usage = engine.session_bill(session_id, who, tenant)
    return web.reply(200, views.session_view(session_id, history, compactions, usage))
