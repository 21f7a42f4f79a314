"""What an operator does to turns from outside the API: find them, read one whole, re-drive, expire.

``loopengine admin`` (:mod:`loopengine.local.admin`) is built on this, over the Engine and the store
ports. Each action is recorded in the turn's audit as the operator's (``decidedBy`` a typed
identity, ``channel`` ``admin``), and each goes through the path the system itself uses, so an
operator can repeat one safely:

* ``redrive`` invokes the resume the way the sweep does (:func:`~loopengine.app.worker.runner.hand_on`'s
  invoke, the version the turn recorded): the resume's claim is a compare-and-set, so a turn
  re-driven twice (or re-driven while the sweep hands it on) runs once, and a call that was claimed
  but has no outcome is reported ``unknown``, never run a second time.
* ``expire`` closes one open item as nobody's answer under the agent's ``on_expiry`` policy
  (:func:`~loopengine.app.request.expiry.expire_due`), deadline or not.
* ``dismiss`` records that a dead-lettered resume was dropped because its turn had moved on.

Reads (``turns``, ``show``) change nothing and record nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from loopengine.app.engine import Engine
from loopengine.app.request import expiry
from loopengine.app.request.items import ItemView
from loopengine.authoring.context import ToolContext
from loopengine.domain.base.errors import Forbidden, InvalidInput, LoopengineError, StoreError
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.fate import FateState, item_fate
from loopengine.domain.principals import Principal
from loopengine.domain.turns import CallRecord, TurnQuery, TurnRecord, TurnStatus

CHANNEL = "admin"
"""The channel an operator's actions are recorded under."""


@dataclass(frozen=True, slots=True)
class CallView:
    """One tool call of a turn, with the idempotency key its provider knows it by."""

    record: CallRecord
    idempotency_key: str

    @property
    def outcome(self) -> str:
        """``ok``, ``error``, ``unknown``, ...; ``started`` while claimed with no outcome yet."""
        return self.record.outcome or "started"


@dataclass(frozen=True, slots=True)
class TurnDetail:
    """A turn as an operator reads it: the record, every item it paused on, its calls and audit."""

    turn: TurnRecord
    items: tuple[ItemView, ...]
    calls: tuple[CallView, ...]
    audit: list[JsonDict]


@dataclass(frozen=True, slots=True)
class Action:
    """What an operator's action did: ``done`` (else ``note`` says why not) and the turn after it."""

    turn_id: str
    done: bool
    note: str
    before: TurnStatus | None = None
    after: TurnRecord | None = None


class Operator:
    """An operator's actions on the turns of one Engine, recorded as ``who``'s."""

    def __init__(self, engine: Engine, who: Principal) -> None:
        if not who.operator:
            raise Forbidden(f"{who.id} is not an operator")
        self.engine = engine
        self.who = who

    def turns(self, query: TurnQuery) -> list[TurnRecord]:
        """The turns ``query`` matches, newest first."""
        if query.limit < 1:
            raise InvalidInput("the limit must be at least 1")
        return self.engine.rt.stores.turns.list_turns(query)

    def show(self, turn_id: str) -> TurnDetail:
        """The turn, every item it paused on (with its fate), its calls and its audit trail."""
        turn = self.engine.turn(turn_id)
        audit = self.engine.audit(turn_id)
        pending = [e["pendingId"] for e in audit if str(e.get("type", "")).endswith(":pending")]
        items = tuple(self._item(p) for p in dict.fromkeys(pending) if isinstance(p, str))
        calls = tuple(
            CallView(c, ToolContext.key_for(turn.tenant, turn.turn_id, c.tool_use_id))
            for c in self.engine.rt.stores.turns.calls(turn_id).values()
        )
        return TurnDetail(turn, items, calls, audit)

    def _item(self, pending_id: str) -> ItemView:
        """The item and its fate; without its tool when this process lacks the agent's code."""
        try:
            return self.engine.item(pending_id)
        except LoopengineError:
            cp = self.engine.rt.stores.checkpoints.find_by_pending(pending_id)
            turn = self.engine.rt.stores.turns.get_turn(cp.turn_id) if cp is not None else None
            stop = (turn.stop_reason or turn.stop_requested) if turn is not None else None
            return ItemView(pending_id, cp, turn, item_fate(cp, stop, pending_id, self.engine.now()))

    def redrive(self, turn_id: str, **note: Any) -> Action:
        """Invoke the turn's resume as the sweep would, if it can move on now; ``note`` joins the audit.

        A paused turn waits for people (decide or expire its items); a finished one has nothing
        left; a running one whose runner still holds its lease is left to it. A turn waiting for
        its model retry is made due now. The invoke itself runs with this engine's invoker (the
        resume function, or this process).
        """
        rt = self.engine.rt
        turn = self.engine.turn(turn_id)
        now = self.engine.now()
        why = _not_now(turn, now)
        if why is not None:
            return Action(turn_id, False, why, turn.status, turn)
        event = rt.stamp("redriven", **self.who.decided_by().fields(), status=turn.status.value, **note)
        moved = None
        if turn.status is TurnStatus.RETRYING and (turn.due_at or 0.0) > now:
            moved = rt.update_turn(turn_id, lambda t: _retry_now(t, now), turn, event)
        if moved is None:
            rt.stores.turns.add_event(turn_id, event)
        turn = moved or turn
        try:
            rt.invoker.invoke(turn.turn_id, turn.code_version)
        except Exception as exc:  # recorded like any failed invoke; the sweep tries again too
            error = f"{type(exc).__name__}: {exc}"
            rt.event(turn_id, "invoke_failed", for_agent=turn.agent, error=error)
            raise StoreError(f"could not invoke the resume of {turn_id}: {error}") from exc
        return Action(turn_id, True, "resume invoked", turn.status, self.engine.turn(turn_id))

    def dismiss(self, turn_id: str, reason: str, **note: Any) -> Action:
        """Record that a dead-lettered resume of the turn is dropped (it had moved on)."""
        turn = self.engine.turn(turn_id)
        who = self.who.decided_by().fields()
        self.engine.rt.event(turn_id, "dead_letter_dismissed", **who, reason=reason, **note)
        return Action(turn_id, True, f"dropped the dead letter: {reason}", turn.status, turn)

    def expire(self, pending_id: str) -> Action:
        """Close one open item now as nobody's answer (the agent's ``on_expiry``); the turn then moves on."""
        view = self.engine.item(pending_id)
        turn = view.turn
        if view.checkpoint is None or turn is None:
            return Action("", False, f"no pending item {pending_id}")
        if view.fate.state not in (FateState.OPEN, FateState.EXPIRED) or view.fate.decision is not None:
            return Action(turn.turn_id, False, f"already {view.fate.state.value}", turn.status, turn)
        count = expiry.expire_due(self.engine.rt, turn, only=pending_id, by=self.who.decided_by())
        after = self.engine.turn(turn.turn_id)
        if not count:
            return Action(turn.turn_id, False, "it was decided meanwhile", turn.status, after)
        return Action(turn.turn_id, True, "expired", turn.status, after)


def _not_now(turn: TurnRecord, now: float) -> str | None:
    """Why the turn cannot be re-driven now (None: it can)."""
    if turn.status is TurnStatus.FINISHED:
        reason = turn.stop_reason.value if turn.stop_reason else "finished"
        return f"finished ({reason}): nothing left to resume"
    if turn.status is TurnStatus.PAUSED:
        return "paused: it waits for its items (decide them, or `loopengine admin expire ITEM`)"
    if turn.status is TurnStatus.RUNNING and turn.lease_until > now:
        left = turn.lease_until - now
        return (
            f"running: its runner holds it for {left:.0f} s more; re-drive it after that if it has not moved"
        )
    return None


def _retry_now(turn: TurnRecord, now: float) -> TurnRecord | None:
    """A turn waiting for its model retry, made due now (the resume's claim then takes it)."""
    if turn.status is not TurnStatus.RETRYING or (turn.due_at or 0.0) <= now:
        return None
    return replace(turn, due_at=now)
