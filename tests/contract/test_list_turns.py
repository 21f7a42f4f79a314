"""TurnStore contract: the operator's list of turns (``loopengine admin turns``), by every filter."""

from __future__ import annotations

import dataclasses

from loopengine.app.ports import Change, Stores
from loopengine.domain.turns import StopReason, TurnQuery, TurnStatus
from tests.contract import T0, turn


def test_list_turns_filters_by_status_agent_tenant_and_age_newest_first(stores: Stores) -> None:
    old = turn(created_at=T0)
    paused = turn(created_at=T0 + 10, status=TurnStatus.PAUSED)
    other_tenant = dataclasses.replace(turn(created_at=T0 + 20, status=TurnStatus.PAUSED), tenant="globex")
    other_agent = dataclasses.replace(turn(created_at=T0 + 30), agent="returns-desk")
    default_tenant = dataclasses.replace(turn(created_at=T0 + 40), tenant="")
    for record in (old, paused, other_tenant, other_agent, default_tenant):
        stores.turns.create_turn(record)
    # a turn that finished in error after it was created (the stored status is what is listed)
    errored = dataclasses.replace(old, status=TurnStatus.FINISHED, stop_reason=StopReason.ERROR)
    stores.turns.commit(Change(old.turn_id, turn=errored))

    def ids(**query: object) -> list[str]:
        return [t.turn_id for t in stores.turns.list_turns(TurnQuery(**query))]  # type: ignore[arg-type]

    everything = [default_tenant, other_agent, other_tenant, paused, old]
    assert ids() == [t.turn_id for t in everything]
    assert ids(status=TurnStatus.PAUSED) == [other_tenant.turn_id, paused.turn_id]
    assert ids(status=TurnStatus.PAUSED, tenant="acme") == [paused.turn_id]
    assert ids(tenant="") == [default_tenant.turn_id]
    assert ids(agent="returns-desk") == [other_agent.turn_id]
    recent = [default_tenant.turn_id, other_tenant.turn_id, paused.turn_id]
    assert ids(agent="customer-service", since=T0 + 10) == recent
    assert ids(stop_reason=StopReason.ERROR) == [old.turn_id]
    assert ids(status=TurnStatus.FINISHED, stop_reason=StopReason.END_TURN) == []
    assert ids(limit=2) == [default_tenant.turn_id, other_agent.turn_id]
    assert ids(since=T0 + 41) == []
    listed = stores.turns.list_turns(TurnQuery(stop_reason=StopReason.ERROR))
    assert listed[0].status is TurnStatus.FINISHED and listed[0].version == errored.version + 1
