"""Where a message goes: its tenant, and the session's turns that stand in its way."""

from __future__ import annotations

from loopengine.authoring.agent import AgentConfig
from loopengine.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from loopengine.domain.principals import Principal
from loopengine.domain.turns import TurnRecord, TurnStatus


def tenant_for(who: Principal, named: str | None, sid: str, earlier: list[TurnRecord]) -> str:
    """The tenant a message goes to.

    The one named (403 outside the caller's scope), else the session's (an existing session keeps
    its tenant; another tenant's session does not exist for the caller), else the caller's own.
    """
    if named:
        if not who.sees(named):
            raise Forbidden(f"{who.id} may not act in tenant {named!r}")
        return named
    if earlier:
        if not who.sees(earlier[0].tenant):
            raise NotFound(f"no session {sid!r}")
        return earlier[0].tenant
    if who.tenants is None or "" in who.tenants:
        return ""
    if len(who.tenants) == 1:
        return next(iter(who.tenants))
    raise InvalidInput("tenant is required: you may act in several tenants")


def active_turns(sid: str, config: AgentConfig, tenant: str, earlier: list[TurnRecord]) -> list[TurnRecord]:
    """The session's unfinished turns (404 for another tenant's session, 409 for another agent's)."""
    for turn in earlier:
        if turn.tenant != tenant:  # another tenant's session does not exist for this caller
            raise NotFound(f"no session {sid!r}")
        if turn.agent != config.name:
            raise Conflict(f"session {sid} belongs to agent {turn.agent!r}")
    return [t for t in earlier if t.status is not TurnStatus.FINISHED]
