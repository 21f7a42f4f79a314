"""``GET /usage``: what model calls used, per tenant, agent and UTC day."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from loopengine.app import api_models as m
from loopengine.app import views
from loopengine.http import auth, root, web
from loopengine.http.openapi import answers
from loopengine.http.validation import AgentQuery, TenantQuery

router = Router()  # type: ignore[no-untyped-call]

DAY_PATTERN = r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$"


@router.get(
    "/usage",
    summary="Token usage per tenant, agent and UTC day (the caller's tenants)",
    responses=answers({200: m.UsageList}, 400, 403),
)
def get_usage(
    tenant: TenantQuery = None,
    agent: AgentQuery = None,
    day: Annotated[
        str | None, Query(pattern=DAY_PATTERN, description="YYYY-MM-DD, UTC (default: today)")
    ] = None,
) -> Response[m.UsageList]:
    days = root.engine().usage(tenant=tenant, agent=agent, day=day, who=auth.current(router))
    return web.reply(200, views.usage_list(days))
