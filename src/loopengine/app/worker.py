"""A claim on a turn, where a turn stands, and the moves that end a claim.

:class:`Worker` holds the claim (lease, heartbeat, time budget); :class:`TurnOutcome` says where a
turn stands; :func:`finish` ends a turn and :func:`hand_on` passes it to the resume worker.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from loopengine.app import delivery, faults
from loopengine.app.ports import Append, Change
from loopengine.app.runtime import Runtime
from loopengine.authoring.agent import AgentConfig
from loopengine.domain import notifications
from loopengine.domain import turn_state as ts
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint
from loopengine.domain.errors import NotFound
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus


@dataclass(frozen=True)
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


@dataclass
class Worker:
    """One claim on a turn: who holds it, its time budget and the invocation's hard end."""

    rt: Runtime
    turn_id: str
    runner: str
    deadline: float | None = None
    hard_limit: float | None = None

    def lease_until(self) -> float:
        """A lease end from now, never past the invocation's end."""
        until = self.rt.stores.clock.now() + self.rt.lease_seconds
        return min(until, self.hard_limit) if self.hard_limit is not None else until

    @contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Renew the lease every third of it while the step inside runs (a background thread)."""
        stop = threading.Event()
        interval = self.rt.lease_seconds / 3

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    self.rt.update_turn(self.turn_id, lambda t: ts.renew(t, self.runner, self.lease_until()))
                except Exception:  # a missed beat only shortens the lease; the step goes on
                    continue

        thread = threading.Thread(target=beat, name=f"heartbeat-{self.turn_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()


def hand_on(rt: Runtime, turn: TurnRecord) -> None:
    """Ask the resume worker to claim ``turn``; a failed invoke is recorded, the sweep retries it."""
    try:
        faults.point("invoke")
        rt.invoker.invoke(turn.turn_id, turn.code_version)
    except Exception as exc:  # the turn is durably ready: the sweep invokes it after the grace
        try:
            rt.event(turn.turn_id, "invoke_failed", error=f"{type(exc).__name__}: {exc}")
        except Exception:
            return


def finish(
    worker: Worker,
    config: AgentConfig,
    turn: TurnRecord,
    stop: StopReason,
    text: str | None,
    answer: Append | None = None,
) -> TurnOutcome:
    """Finish the turn (appending the batch's ``answer`` if given), record it, send ``run_finish``."""
    rt = worker.rt
    notes = delivery.announce(rt, config, turn, notifications.run_finish(turn, stop.value, text))
    event = rt.stamp("finished", stopReason=stop.value, text=text)

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        done = ts.finish(t, worker.runner, stop, text)
        return (
            None
            if done is None
            else Change(t.turn_id, turn=done, append=answer, events=(event,), outbox=notes)
        )

    done = rt.transition(turn.turn_id, decide, turn=turn)
    if done is None or done.turn is None:
        return outcome_of(load_turn(rt, turn.turn_id))
    delivery.deliver(rt, notes)
    start_next_queued(rt, turn.session_id)
    return outcome_of(done.turn)


def start_next_queued(rt: Runtime, session_id: str) -> None:
    """The session is free: the next queued message starts its turn (the sweep retries if lost)."""
    unfinished = rt.stores.turns.unfinished_session_turns(session_id)
    waiting = [t for t in unfinished if t.status is TurnStatus.QUEUED]
    if waiting:
        hand_on(rt, waiting[0])


def load_turn(rt: Runtime, turn_id: str) -> TurnRecord:
    """The turn record (NotFound when there is none)."""
    turn = rt.stores.turns.get_turn(turn_id)
    if turn is None:
        raise NotFound(f"no turn {turn_id!r}")
    return turn
