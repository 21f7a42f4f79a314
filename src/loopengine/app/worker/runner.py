"""A claim on a turn and the moves that end a claim.

:class:`Worker` holds the claim (lease, heartbeat, time budget); :class:`Carry` is what rides in a
step's write; :func:`finish` ends a turn.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from loopengine.app import delivery, faults
from loopengine.app.outcome import TurnOutcome, load_turn, outcome_of
from loopengine.app.ports import Append, Change, Committed
from loopengine.app.request.handoff import start_next_queued
from loopengine.app.runtime import Decide, Runtime
from loopengine.app.worker.batch import Ran, durably, record_alone
from loopengine.authoring.agent import AgentConfig
from loopengine.domain import notifications
from loopengine.domain import turn_state as ts
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.messages import Message, ToolResultBlock
from loopengine.domain.tokens.usage import Usage
from loopengine.domain.turns import CallRecord, StopReason, TurnRecord


@dataclass(frozen=True, slots=True)
class Carry:
    """What rides in a step's write besides the step's own change, so a step costs one write.

    ``message``: the model's response, not yet stored: the write appends it ahead of whatever it
    appends itself (the batch's answer), and renews the lease as recording a response does;
    ``verdicts``: gate verdicts to record (recorded ones win: first write wins); ``ran``: calls run
    since the last write (their outcomes and ``tool_outcome`` events); ``events``: audit events of
    the response (``model_response``, ``auto_approved``); ``usage``: what the response's call used
    (added to the turn's ``metered`` with the message).
    """

    message: Message | None = None
    verdicts: Mapping[str, JsonDict] = field(default_factory=dict)
    ran: tuple[Ran, ...] = ()
    events: tuple[JsonDict, ...] = ()
    usage: Usage | None = None

    def onto(self, turn: TurnRecord, runner: str, lease_until: float) -> TurnRecord | None:
        """``turn`` with the verdicts recorded (and the lease renewed for a response); None if not ours."""
        if self.message is not None:
            answered = ts.model_answered(turn, runner, lease_until)
            if answered is None:
                return None
            turn = (
                answered
                if self.usage is None
                else replace(answered, metered=answered.metered.plus(self.usage))
            )
        missing = {k: v for k, v in self.verdicts.items() if k not in turn.verdicts}
        return replace(turn, verdicts={**turn.verdicts, **missing}) if missing else turn

    def plus(self, ran: list[Ran]) -> Carry:
        """The same, with more calls run."""
        return replace(self, ran=(*self.ran, *ran))

    def calls(self) -> tuple[CallRecord, ...]:
        """Outcomes to record."""
        return tuple(r.record for r in self.ran if r.record is not None)

    def all_events(self) -> tuple[JsonDict, ...]:
        """The response's events, then each call's outcome event."""
        return (*self.events, *(r.event for r in self.ran if r.event is not None))

    def results(self) -> list[ToolResultBlock]:
        """The results of the calls run."""
        return [r.result for r in self.ran]

    def commit(self, rt: Runtime, turn_id: str, decide: Decide, turn: TurnRecord) -> Committed | None:
        """``rt.transition``; retried through a transient store error when it carries outcomes."""
        if not self.calls():
            return rt.transition(turn_id, decide, turn=turn)
        done = durably(lambda: rt.transition(turn_id, decide, turn=turn))
        if done is None:
            record_alone(rt, list(self.ran))
        return done

    def landed(self) -> None:
        """The write carrying this landed (a crash point once the response is stored)."""
        if self.message is not None:
            faults.point("model_recorded")


NOTHING = Carry()


@dataclass
class Worker:
    """One claim on a turn: who holds it, its time budget and the invocation's hard end."""

    rt: Runtime
    turn_id: str
    runner: str
    deadline: float | None = None
    hard_limit: float | None = None
    claimed: dict[str, CallRecord] = field(default_factory=dict)
    """Calls this worker claimed in its own last write and has not run yet, by toolUseId."""
    closing: TurnCheckpoint | None = None
    """The closed checkpoint this worker's claim read (the batch it resumes on), if any."""

    @classmethod
    def within(
        cls,
        rt: Runtime,
        turn_id: str,
        runner: str,
        budget_seconds: float | None,
        remaining_seconds: float | None,
    ) -> Worker:
        """A worker holding ``turn_id`` for ``runner`` within a time budget and the time left to run.

        Both are seconds from now (``None``: no limit); the worker keeps them as clock times.
        """
        now = rt.stores.clock.now()
        deadline = None if budget_seconds is None else now + budget_seconds
        hard = None if remaining_seconds is None else now + remaining_seconds
        return cls(rt, turn_id, runner, deadline, hard)

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


def finish(
    worker: Worker,
    config: AgentConfig,
    turn: TurnRecord,
    stop: StopReason,
    text: str | None,
    answer: Append | None = None,
    carry: Carry = NOTHING,
) -> TurnOutcome:
    """Finish the turn (appending the batch's ``answer`` if given), record it, send ``run_finish``.

    ``carry`` rides in the same write; its ``message``, if any, must already be in ``answer``.
    """
    rt = worker.rt
    notes = delivery.announce(rt, config, turn, notifications.run_finish(turn, stop.value, text))
    event = rt.stamp("finished", stopReason=stop.value, text=text)

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        held = carry.onto(t, worker.runner, worker.lease_until())
        done = None if held is None else ts.finish(held, worker.runner, stop, text)
        if done is None:
            return None
        events = (*carry.all_events(), event)
        return Change(t.turn_id, turn=done, append=answer, events=events, outbox=notes, calls=carry.calls())

    done = carry.commit(rt, turn.turn_id, decide, turn)
    if done is None or done.turn is None:
        return outcome_of(load_turn(rt, turn.turn_id))
    carry.landed()
    delivery.deliver(rt, notes)
    if done.turn.queued_behind:  # (else no message waits: the session needs no read)
        start_next_queued(rt, turn.session_key)
    return outcome_of(done.turn)
