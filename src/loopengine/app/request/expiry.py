"""Expiry, in one place: an item nobody answered in time is closed by the agent's policy (never "failed").

Three moments find an item past its deadline, and all three come here:

* the sweep, for every parked turn whose due time (its next expiry) has passed
  (:func:`loopengine.app.worker.sweep.sweep`);
* a decision that arrives too late (an API resolve, a button, a magic-link POST):
  :func:`loopengine.app.request.resolution` records the expiry first and answers ``alreadyResolved``;
* an explicit :meth:`loopengine.app.engine.Engine.expire` (an operator, a test).

A GET (a magic-link page, the inbox) never records anything: it shows the item as expired through
:func:`loopengine.domain.fate.item_fate`, and the next of the three moments records it.
"""

from __future__ import annotations

from loopengine.app.ports import Change
from loopengine.app.request.handoff import hand_on
from loopengine.app.runtime import Runtime
from loopengine.domain import checkpoint as cps
from loopengine.domain import turn_state as ts
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.decisions import DecidedBy
from loopengine.domain.policy import describe
from loopengine.domain.turns import TurnRecord, TurnStatus


def expire_due(rt: Runtime, turn: TurnRecord, only: str | None = None, by: DecidedBy | None = None) -> int:
    """Apply the expiry policy to every item of the turn's parked batch that is past its deadline.

    The same write makes the turn ready if that closed the batch (then it is handed on), or moves
    its due time to the next expiry. Returns how many items expired.

    ``only`` and ``by``: an operator (``loopengine admin expire``) closes that one open item now,
    deadline or not, as nobody's answer under the same policy; the record says who.
    """
    if turn.status is not TurnStatus.PAUSED or turn.checkpoint_id is None:
        return 0
    now = rt.stores.clock.now()
    expired: list[str] = []

    def decide(t: TurnRecord, cp: TurnCheckpoint | None) -> Change | None:
        expired.clear()
        if cp is None or cp.closed:
            return None
        due = [i for i in cp.outstanding.values() if i.expires_at is not None and i.expires_at <= now]
        if only is not None:
            due = [cp.outstanding[only]] if only in cp.outstanding else []
        if not due:
            return None
        for item in due:
            waited = describe(round(min(item.expires_at or now, now) - cp.created_at))
            cp = cps.expire(cp, item, now, waited, by)
            expired.append(item.pending_id)
        moved = (
            ts.ready(t, cp.id, now, rt.handoff_grace)
            if cp.closed
            else ts.paused_due(t, cp.id, cp.next_expiry)
        )
        if moved is None:
            return None
        who = {"decidedBy": "policy"} if by is None else by.fields()
        events = tuple(rt.stamp("expired", pendingId=p, **who) for p in expired)
        return Change(t.turn_id, turn=moved, checkpoint=cp, events=events)

    done = rt.transition(turn.turn_id, decide, turn=turn, checkpoint=turn.checkpoint_id)
    if done is None or done.turn is None:
        return 0
    if done.turn.status is TurnStatus.READY:
        hand_on(rt, done.turn)
    return len(expired)
