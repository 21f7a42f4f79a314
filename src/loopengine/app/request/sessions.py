"""Where a message goes: its tenant, and the session's turns that stand in its way."""

from __future__ import annotations

from loopengine.authoring.agent import AgentConfig
from loopengine.domain.base.errors import Conflict, Forbidden, InvalidInput, NotFound
from loopengine.domain.principals import Principal
from loopengine.domain.turns import TurnRecord, TurnStatus


def tenant_for(who: Principal, named: str | None) -> str:
    """The tenant a message goes to: the one named (403 outside the caller's scope), else the caller's own.

    Session ids are scoped by tenant (:func:`~loopengine.domain.base.ids.session_key`): a sessionId names a
    session within this tenant, so another tenant's session of the same id is never reached, and
    whether one exists cannot be told. A caller of several tenants names one; an unscoped caller (the
    operator) without a tenant acts in the default tenant ``""``.
    """
    if named:
        if not who.sees(named):
            raise Forbidden(f"{who.id} may not act in tenant {named!r}")
        return named
    if who.tenants is None or "" in who.tenants:
        return ""
    if len(who.tenants) == 1:
        return next(iter(who.tenants))
    raise InvalidInput("tenant is required: you may act in several tenants")


def active_turns(
    sid: str, config: AgentConfig, tenant: str, owner: tuple[str, str] | None, unfinished: list[TurnRecord]
) -> list[TurnRecord]:
    """The session's unfinished turns (409 for another agent's session)."""
    if owner is not None:
        owner_tenant, owner_agent = owner
        if owner_tenant != tenant:  # (cannot happen: the session's key holds its tenant)
            raise NotFound(f"no session {sid!r}")
        if owner_agent != config.name:
            raise Conflict(f"session {sid} belongs to agent {owner_agent!r}")
    return [t for t in unfinished if t.status is not TurnStatus.FINISHED]
