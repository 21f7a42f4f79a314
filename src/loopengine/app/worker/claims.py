"""Calls run from the loop: which call's claim rides in a write, whether a call fits, running one.

A call's claim rides in the write that decides it runs (:func:`first_claim`: only the first of a
batch, and only if its timeout fits the time the invocation has left, :func:`no_time_for`); the
call then runs through :func:`run_one`, which checks for a stop first (before the first call the
record in hand is the check; before each later one the flag is read).
"""

from __future__ import annotations

from loopengine.app.runtime import Runtime
from loopengine.app.worker.batch import Call, Ran, claim_of, not_run, run_call, stop_requested
from loopengine.app.worker.runner import Worker
from loopengine.authoring.agent import AgentConfig
from loopengine.domain import outcomes
from loopengine.domain.checkpoint import TurnCheckpoint, decisions_for
from loopengine.domain.decisions import Approve
from loopengine.domain.messages import ToolUseBlock
from loopengine.domain.turns import CallRecord, TurnRecord, TurnStatus

_RECORD_MARGIN = 2.0
"""Seconds a tool call needs past its timeout (the runner's grace, the outcome's write)."""


def first_claim(
    worker: Worker, config: AgentConfig, turn: TurnRecord, uses: list[ToolUseBlock], now: float
) -> tuple[CallRecord, ...]:
    """The claim of the first call to run, to ride in the write that decides it runs (if it fits).

    Only the first: a later call may not fit the time left once the first has run, and a claimed
    call must run (or be recorded as not run); later calls are claimed on their own before they run.
    """
    if not uses or no_time_for(worker, config, uses[0]):
        return ()
    return (claim_of(turn, uses[0], now),)


def landed_claim(
    rt: Runtime, turn_id: str, runner: str, claims: tuple[CallRecord, ...] = ()
) -> TurnRecord | None:
    """After a claim write the store answered with an error: the turn, if the write landed anyway.

    A write whose every attempt was applied and answered by nothing (the network failed after
    DynamoDB) raises once botocore's retries run out, though it landed. A read settles it: a turn
    held by ``runner`` (new for every claim of a turn) whose ``claims`` are recorded took this
    worker's write (while it holds the turn no one else writes), and those calls are this worker's
    to run; else the write did not land (None). A read that fails too raises: then nobody can tell,
    and a claimed call is ``unknown`` for good.
    """
    current = rt.stores.turns.get_turn(turn_id)
    if current is None or current.status is not TurnStatus.RUNNING or current.runner != runner:
        return None
    recorded = rt.stores.turns.calls(turn_id) if claims else {}
    return current if all(c.tool_use_id in recorded for c in claims) else None


def run_one(
    worker: Worker,
    config: AgentConfig,
    turn: TurnRecord,
    call: Call,
    first: bool = True,
) -> Ran:
    """Run one call unless a stop was requested first.

    Before the first call of a step the record in hand is the check (its write's version condition
    saw no stop); before each later one the stop flag is read.
    """
    rt, use = worker.rt, call.use
    claim = worker.claimed.pop(use.id, None)
    stop = turn.stop_requested if first else stop_requested(rt, worker.turn_id)
    if stop is not None:
        if claim is not None:  # claimed here and never started: this process knows it did not run
            return not_run(rt, claim, stop)
        if use.id not in rt.stores.turns.calls(worker.turn_id):
            return Ran(outcomes.cancelled(use.id, stop))
    with worker.heartbeat():  # (a call already started is never re-run: run_call reports it)
        return run_call(rt, config, turn, call, claim)


def no_time_for(worker: Worker, config: AgentConfig, use: ToolUseBlock) -> bool:
    """The call's timeout does not fit the time this invocation has left: hand the turn on first.

    The limit is the invocation's end (``hard_limit``; else the time budget), less a margin to record
    the outcome: running the call anyway could end the invocation mid-call and make it ``unknown``.
    A call that has started is answered from its record; a call handed on once for this reason runs
    on the next worker whatever its time (a second hand-off could go on for ever). A call this worker
    claimed runs (its claim was written only once it fitted: see :func:`first_claim`).
    """
    rt = worker.rt
    limit = worker.hard_limit if worker.hard_limit is not None else worker.deadline
    needed = config.timeout_of(use.name) + _RECORD_MARGIN
    if limit is None or rt.stores.clock.now() + needed <= limit:
        return False
    if use.id in worker.claimed or use.id in rt.stores.turns.calls(worker.turn_id):
        return False
    handed = (e for e in rt.stores.turns.events(worker.turn_id) if e["type"] == "handed_off")
    return all(e.get("toolUseId") != use.id for e in handed)


def approval_of(cp: TurnCheckpoint, pending_id: str) -> Approve | None:
    """The person's approval of one item (who, when, through what, with what note or edit)."""
    return next((d for d in reversed(decisions_for(cp, pending_id)) if isinstance(d, Approve)), None)
