"""Where a turn stands: :class:`TurnOutcome`, read from the records (both sides answer with it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from loopengine.app.runtime import Runtime
from loopengine.domain.base.errors import NotFound
from loopengine.domain.checkpoint import PendingItem
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """Where a turn stands after the loop stopped advancing it."""

    turn_id: str
    session_id: str
    status: TurnStatus
    stop_reason: StopReason | None
    text: str | None = None
    pending: list[PendingItem] = field(default_factory=list)


def outcome_of(turn: TurnRecord, pending: list[PendingItem] | None = None) -> TurnOutcome:
    """Describe a turn record."""
    return TurnOutcome(turn.turn_id, turn.session_id, turn.status, turn.stop_reason, turn.text, pending or [])


def load_turn(rt: Runtime, turn_id: str) -> TurnRecord:
    """The turn record (NotFound when there is none)."""
    turn = rt.stores.turns.get_turn(turn_id)
    if turn is None:
        raise NotFound(f"no turn {turn_id!r}")
    return turn


def outcome(rt: Runtime, turn_id: str) -> TurnOutcome:
    """The turn's current outcome, with its open pending items."""
    turn = load_turn(rt, turn_id)
    pending = []
    if turn.status is TurnStatus.PAUSED and turn.checkpoint_id:
        cp = rt.stores.checkpoints.get(turn.checkpoint_id)
        if cp is not None and not cp.closed:
            pending = list(cp.outstanding.values())
    return outcome_of(turn, pending)
