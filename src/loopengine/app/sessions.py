"""Where a message goes: its tenant, and the session's turns that stand in its way."""

from __future__ import annotations

from loopengine.authoring.agent import AgentConfig
from loopengine.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from loopengine.domain.principals import Principal
from loopengine.domain.turns import TurnRecord, TurnStatus


def tenant_for(who: Principal, named: str | None, sid: str, owner: tuple[str, str] | None) -> str:
    """The tenant a message goes to.

    The one named (403 outside the caller's scope), else the session's (an existing session keeps
    its tenant; another tenant's session does not exist for the caller), else the caller's own.
    ``owner``: the session's (tenant, agent), None for a new session.
    """
    if named:
        if not who.sees(named):
            raise Forbidden(f"{who.id} may not act in tenant {named!r}")
        return named
    if owner is not None:
        if not who.sees(owner[0]):
            raise NotFound(f"no session {sid!r}")
        return owner[0]
    if who.tenants is None or "" in who.tenants:
        return ""
    if len(who.tenants) == 1:
        return next(iter(who.tenants))
    raise InvalidInput("tenant is required: you may act in several tenants")


def active_turns(
    sid: str, config: AgentConfig, tenant: str, owner: tuple[str, str] | None, unfinished: list[TurnRecord]
) -> list[TurnRecord]:
    """The session's unfinished turns (404 for another tenant's session, 409 for another agent's)."""
    if owner is not None:
        owner_tenant, owner_agent = owner
        if owner_tenant != tenant:  # another tenant's session does not exist for this caller
            raise NotFound(f"no session {sid!r}")
        if owner_agent != config.name:
            raise Conflict(f"session {sid} belongs to agent {owner_agent!r}")
    return [t for t in unfinished if t.status is not TurnStatus.FINISHED]
