"""A token allowance per tenant and UTC day (``LOOPENGINE_TENANT_DAILY_TOKENS``; off when unset).

What counts is :meth:`~loopengine.domain.metering.Metered.tokens`: billed input-token equivalents
(cache reads at a tenth, writes at 1.25) plus output tokens, of every agent of the tenant that day.
Past the allowance a new message is refused (429 ``token_allowance_exceeded``, ``Retry-After`` to
the next UTC day: :func:`check_start`) and a running turn finishes at its next step, before its next
model call, with stopReason ``token_allowance`` (:func:`exhausted`); nothing recorded is lost, and
the session goes on the next day.

The day's use is read from the tenant's daily counters (what paused and finished turns counted)
plus what the running turn used since it last counted. A process keeps a tenant's figure for
:data:`FRESH_SECONDS`, so a step does not read the counters each time: other turns' use shows
within that long, and a tenant may go past its allowance by what its turns use meanwhile.
"""

from __future__ import annotations

import threading
import weakref

from loopengine.app.runtime import Runtime
from loopengine.domain.errors import LoopengineError
from loopengine.domain.metering import Metered, day_of, next_day_at
from loopengine.domain.turns import TurnRecord

FRESH_SECONDS = 10.0
"""How long a process reuses a tenant's figure for the day before reading its counters again."""

_seen: weakref.WeakKeyDictionary[object, dict[tuple[str, str], tuple[float, float]]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


class TokenAllowanceExceeded(LoopengineError):
    """The tenant used its tokens for the day (429; ``retry_after``: seconds to the next UTC day)."""

    code = "token_allowance_exceeded"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def used_today(rt: Runtime, tenant: str, fresh: bool = False) -> float:
    """Tokens ``tenant`` used today by its counters (a figure up to :data:`FRESH_SECONDS` old)."""
    now = rt.stores.clock.now()
    key = (tenant, day_of(now))
    with _lock:
        held = _seen.setdefault(rt.stores.turns, {}).get(key)
    if held is not None and not fresh and now - held[0] < FRESH_SECONDS:
        return held[1]
    used = Metered.total(d.metered for d in rt.stores.turns.daily_usage(tenant, key[1])).tokens()
    with _lock:
        _seen.setdefault(rt.stores.turns, {})[key] = (now, used)
    return used


def check_start(rt: Runtime, tenant: str) -> None:
    """Refuse a new message of a tenant past its allowance (TokenAllowanceExceeded)."""
    limit = rt.tenant_daily_tokens
    if limit is None or used_today(rt, tenant, fresh=True) < limit:
        return
    now = rt.stores.clock.now()
    wait = max(1, int(next_day_at(now) - now))
    raise TokenAllowanceExceeded(
        f"tenant {tenant!r} used its {limit:,} tokens for {day_of(now)} (UTC); new messages are taken "
        "again from the next UTC day",
        wait,
    )


def exhausted(rt: Runtime, turn: TurnRecord) -> bool:
    """Whether the turn's tenant is past its allowance, counting what the turn used and has not counted."""
    limit = rt.tenant_daily_tokens
    if limit is None:
        return False
    return used_today(rt, turn.tenant) + (turn.metered - turn.counted).tokens() >= limit
