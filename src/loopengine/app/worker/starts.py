"""Starting a turn for a message: create it with its message in one write and run it, or queue it.

A started turn is created ``running`` with this request as its worker (the turn and its user
message land together, with the client's ``Idempotency-Key`` if it sent one); the worker then
advances it from the records that write returned, reading nothing back. A queued turn waits behind
the session's unfinished turns, which are marked so that their finish starts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from loopengine.app import delivery, usage
from loopengine.app.outcome import TurnOutcome, outcome
from loopengine.app.ports import Append, Change
from loopengine.app.request.replay import replay
from loopengine.app.runtime import Runtime
from loopengine.app.worker.loop import advance
from loopengine.app.worker.resume import resume_turn
from loopengine.app.worker.runner import Worker
from loopengine.authoring.agent import AgentConfig
from loopengine.domain import notifications
from loopengine.domain import turn_state as ts
from loopengine.domain.base.errors import AlreadyExists, Conflict, VersionConflict
from loopengine.domain.base.ids import new_id, session_key
from loopengine.domain.idempotency import Claim
from loopengine.domain.messages import Message
from loopengine.domain.tokens.context_window import History
from loopengine.domain.turns import TurnRecord, TurnStatus


@dataclass(frozen=True, slots=True)
class Start:
    """A message that starts (or queues) a turn: where it goes and how it came."""

    config: AgentConfig
    session_id: str
    tenant: str
    trigger: str
    message: str
    live: bool = False
    key: Claim | None = None
    fresh: bool = False
    """The session id was just made up: its history is empty without a read."""


def new_turn(rt: Runtime, start: Start, start_seq: int, runner: str | None) -> TurnRecord:
    """The record of a new turn (its config snapshot stored once per process and kept)."""
    config = start.config
    config_hash = config.config_hash()
    rt.remember_config(config.name, config_hash, config.snapshot())  # stored with the turn (config_of)
    now = rt.stores.clock.now()
    return TurnRecord(
        turn_id=new_id("trn_"),
        session_id=start.session_id,
        agent=config.name,
        tenant=start.tenant,
        config_hash=config_hash,
        start_seq=start_seq,
        created_at=now,
        trigger=start.trigger,
        lease_until=now + rt.lease_seconds if runner else 0.0,
        due_at=now + (rt.lease_seconds if runner else rt.handoff_grace),
        runner=runner,
        status=TurnStatus.RUNNING if runner else TurnStatus.QUEUED,
        code_version=rt.code_version,
        live=start.live,
        scoped_session=True,
    )


def queue(rt: Runtime, start: Start, ahead: Sequence[TurnRecord]) -> TurnOutcome:
    """Keep the message in a ``queued`` turn until the turns ``ahead`` have finished."""
    usage.check_start(rt, start.tenant)
    turn = replace(new_turn(rt, start, -1, None), queued_message=start.message)
    event = rt.stamp("queued", trigger=start.trigger)
    held = start.key.record(turn.turn_id, rt.stores.clock.now()) if start.key is not None else None
    try:
        snapshot = (turn.config_hash, start.config.snapshot())
        change = Change(turn.turn_id, new_turn=turn, events=(event,), idempotency=held, config=snapshot)
        rt.observed(change, rt.stores.turns.commit(change))
    except AlreadyExists:  # the same key's first request landed meanwhile
        return replayed(rt, start.key)
    for earlier in ahead:  # its finish starts the next queued turn (it reads the session only then)
        rt.update_turn(earlier.turn_id, ts.queue_behind)
    resume_turn(rt, turn.turn_id)  # in case the way cleared meanwhile
    return outcome(rt, turn.turn_id)


def run(
    rt: Runtime, start: Start, budget_seconds: float | None, remaining_seconds: float | None
) -> TurnOutcome:
    """Create the turn and append its message in one write, then run it (this request is its worker)."""
    usage.check_start(rt, start.tenant)  # (a replayed request was answered before: it is no new message)
    where = session_key(start.tenant, start.session_id)
    history = History() if start.fresh else rt.stores.sessions.load_since_compaction(where)
    runner = new_id("run_")
    turn = new_turn(rt, start, len(history), runner)
    notes = delivery.announce(rt, start.config, turn, notifications.run_start(turn, start.trigger))
    event = rt.stamp("started", trigger=start.trigger, configHash=turn.config_hash)
    add = Append(
        session_key(start.tenant, start.session_id), (Message.user_text(start.message),), len(history)
    )
    held = start.key.record(turn.turn_id, rt.stores.clock.now()) if start.key is not None else None
    snapshot = (turn.config_hash, start.config.snapshot())
    create = Change(
        turn.turn_id,
        new_turn=turn,
        append=add,
        events=(event,),
        outbox=notes,
        idempotency=held,
        config=snapshot,
    )
    try:
        created = rt.stores.turns.commit(create)
    except AlreadyExists:  # the same key's first request landed meanwhile
        return replayed(rt, start.key)
    except VersionConflict:
        if start.key is not None and (again := replay(rt, start.key)) is not None:
            return again  # it landed first and moved the session: answer it, not a 409
        raise Conflict(f"session {start.session_id} changed while this message arrived; retry") from None
    rt.observed(create, created)
    delivery.deliver(rt, notes)
    worker = Worker.within(rt, turn.turn_id, runner, budget_seconds, remaining_seconds)
    history.extend(add.messages)
    return advance(worker, created.turn, history)


def replayed(rt: Runtime, key: Claim | None) -> TurnOutcome:
    """The answer to a request whose key another request just used (the store refused ours)."""
    again = replay(rt, key)
    if again is None:
        raise Conflict("a record to create exists; retry")
    return again
