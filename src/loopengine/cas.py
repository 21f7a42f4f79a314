"""Compare-and-set read-modify-write of a checkpoint: the one way any checkpoint changes."""

from __future__ import annotations

from collections.abc import Callable

from loopengine.checkpoint import TurnCheckpoint
from loopengine.errors import Conflict, VersionConflict
from loopengine.runtime import Runtime

MAX_CAS_ATTEMPTS = 50


def modify(
    rt: Runtime, cp_id: str, fn: Callable[[TurnCheckpoint], TurnCheckpoint | None]
) -> tuple[TurnCheckpoint, TurnCheckpoint] | None:
    """Apply ``fn`` atomically; returns (before, after), or ``None`` when ``fn`` declines."""
    store = rt.stores.checkpoints
    current = store.get(cp_id)
    for _ in range(MAX_CAS_ATTEMPTS):
        if current is None:
            return None
        changed = fn(current)
        if changed is None:
            return None
        try:
            return current, store.replace(changed)
        except VersionConflict as conflict:
            current = conflict.current
    raise Conflict(f"checkpoint {cp_id} is too contended; try again")
