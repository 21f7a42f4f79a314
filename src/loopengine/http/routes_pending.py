"""Routes that decide pending items (resolve, answer) and list the open ones."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from loopengine.app import api_models as m
from loopengine.app import views
from loopengine.app.request.resolution import Resolution
from loopengine.domain.base import limits
from loopengine.http import auth, budget, root, web
from loopengine.http.observability import logger
from loopengine.http.openapi import answers
from loopengine.http.validation import AgentQuery, TenantQuery

router = Router()  # type: ignore[no-untyped-call]

PendingId = Annotated[str, Path(alias="pendingId", pattern=m.PENDING_ID_PATTERN, description="pnd_ + 32 hex")]
Wait = Annotated[
    float | None,
    Query(ge=0, le=limits.MAX_WAIT_SECONDS, description="wait up to S seconds for the turn's outcome"),
]
RESOLVED = answers(
    {200: m.Resolution | m.Finished, 202: m.Resuming | m.Paused | m.Working},
    400,
    403,
    404,
    409,
    413,
    415,
    429,
)


@router.post(
    "/pending-approvals/<pendingId>/resolve", summary="Approve or deny a pending call", responses=RESOLVED
)
def resolve(
    pending_id: PendingId, body: Annotated[m.ResolveRequest, Body()], wait: Wait = None
) -> Response[m.ResolveOutcome]:
    logger.set_correlation_id(pending_id)
    return _reply(root.engine().resolve(pending_id, body.verdict(), auth.current(router)), wait)


@router.post("/pending-questions/<pendingId>/answer", summary="Answer a pending question", responses=RESOLVED)
def answer(
    pending_id: PendingId, body: Annotated[m.AnswerRequest, Body()], wait: Wait = None
) -> Response[m.ResolveOutcome]:
    logger.set_correlation_id(pending_id)
    return _reply(root.engine().answer(pending_id, body.reply(), auth.current(router)), wait)


@router.get(
    "/pending-approvals",
    summary="Open pending items of the caller's tenants (the poll surface)",
    responses=answers({200: m.PendingList}, 400, 403),
)
def list_pending(agent: AgentQuery = None, tenant: TenantQuery = None) -> Response[m.PendingList]:
    items = root.engine().open_items(agent=agent, tenant=tenant, who=auth.current(router))
    return web.reply(200, m.PendingList.model_validate({"items": items}))


def _reply(res: Resolution, wait: float | None) -> Response[m.ResolveOutcome]:
    resumes = not res.denied or res.resuming
    if wait and not res.already_resolved and res.outstanding == 0 and resumes and res.turn_id:
        engine = root.engine()
        wait = budget.wait_seconds(wait, router.current_event, engine.now())  # counted from arrival
        return web.reply(*views.turn_outcome(engine.wait(res.turn_id, wait, auth.current(router))))
    return web.reply(*views.resolution(res))
