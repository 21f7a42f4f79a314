"""Compare-and-set of a checkpoint alone: a thin form of :meth:`Runtime.transition`."""

from __future__ import annotations

from collections.abc import Callable

from loopengine.checkpoint import TurnCheckpoint
from loopengine.ports import Change
from loopengine.runtime import Runtime
from loopengine.turns import TurnRecord


def modify(
    rt: Runtime, cp: TurnCheckpoint, fn: Callable[[TurnCheckpoint], TurnCheckpoint | None]
) -> tuple[TurnCheckpoint, TurnCheckpoint] | None:
    """Apply ``fn`` atomically to checkpoint ``cp``; returns (before, after), or ``None`` if declined."""
    seen: list[TurnCheckpoint] = []

    def decide(_turn: TurnRecord, current: TurnCheckpoint | None) -> Change | None:
        changed = fn(current) if current is not None else None
        if current is None or changed is None:
            return None
        seen.append(current)
        return Change(cp.turn_id, checkpoint=changed)

    done = rt.transition(cp.turn_id, decide, checkpoint_id=cp.id, cp=cp)
    if done is None or done.checkpoint is None:
        return None
    return seen[-1], done.checkpoint
