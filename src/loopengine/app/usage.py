"""What the model bill records: usage on the turn, on the tenant's day, and read back.

A model call's usage rides in the write that records its response (``Carry.onto`` adds it to the
turn's ``metered``), and in that write's ``model_response`` event. A pause or a finish adds what the
turn used since it was last counted to the daily counter of its tenant, agent and UTC day, in the same
write (:func:`settle`, applied by ``Runtime.transition`` to every change): no request of its own.
"""

from __future__ import annotations

from dataclasses import replace

from loopengine.app.ports import Change, Stores
from loopengine.domain.errors import Forbidden
from loopengine.domain.history import Compaction
from loopengine.domain.metering import DailyUsage, Metered, Tally, day_of
from loopengine.domain.principals import Principal
from loopengine.domain.turns import TurnStatus

_COUNTED_AT = (TurnStatus.PAUSED, TurnStatus.FINISHED)


def settle(change: Change, now: float) -> Change:
    """``change`` with the turn's uncounted usage added to its tenant's day, when it pauses or finishes."""
    turn = change.turn
    if turn is None or turn.status not in _COUNTED_AT or change.tally is not None:
        return change
    due = turn.metered - turn.counted
    if not due:
        return change
    tally = Tally(turn.tenant, turn.agent, day_of(now), turn.turn_id, due)
    return replace(change, turn=replace(turn, counted=turn.metered), tally=tally)


def session_bill(stores: Stores, key: str) -> tuple[list[Compaction], Metered]:
    """The session's compaction markers, and what its turns' model calls used together."""
    return stores.sessions.compactions(key), Metered.total(t.metered for t in stores.turns.session_turns(key))


def daily(
    stores: Stores, who: Principal | None, tenant: str | None, agent: str | None, day: str | None
) -> list[DailyUsage]:
    """``GET /usage``: per tenant, agent and UTC day, within the tenants ``who`` sees.

    A ``tenant`` outside the caller's scope is 403; without one, every tenant of the caller (the
    operator, in every tenant, names one; else the default tenant ``""``). ``day`` defaults to today.
    """
    if tenant is not None and who is not None and not who.sees(tenant):
        raise Forbidden(f"{who.id} may not read tenant {tenant!r}")
    if tenant is not None:
        tenants = [tenant]
    elif who is None or who.tenants is None:
        tenants = [""]
    else:
        tenants = sorted(who.tenants)
    when = day or day_of(stores.clock.now())
    return [u for t in tenants for u in stores.turns.daily_usage(t, when, agent)]
