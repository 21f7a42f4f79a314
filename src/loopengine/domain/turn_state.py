r"""The turn state machine: every status change of a turn, as pure functions (no I/O).

Each function takes the stored :class:`~loopengine.domain.turns.TurnRecord` and returns the next one, or
``None`` when the transition does not apply to the record as it is now (someone else moved it
first). Callers write the result with one compare-and-set (:func:`loopengine.cas.commit`), so a
duplicate delivery, a late click or a second stop request finds nothing to do.

::

                 request: message                        worker: claim (session free)
      (new) ───────────────────────► RUNNING ◄──────────────────────────────── QUEUED
                                     │  ▲  │ ▲                                   │
              worker: model/tools ───┘  │  │ │ worker: claim (due, or stopping)  │ request: cancel
                                        │  │ │                                   ▼
          worker: pause (items open)    │  │ └──────────── RETRYING ◄─┐      FINISHED
          ┌─────────────────────────────┘  │                          │          ▲
          ▼                                │ worker: claim           │ worker:  │ worker: finish
       PAUSED ──── request/sweep: ────► READY ◄── worker: hand off ───┤ transient│ (end_turn, denied,
          │   last item decided,          ▲       (time budget)       │ model    │  cancelled, error,
          │   expired, or stop            │                           │ error    │  superseded, ...)
          └───────────────────────────────┘                          RUNNING ───┘

``due_at`` is the turn's promise to the sweep: when nothing else moves it, the sweep looks at it
then. The stores index it, so it moves only when the turn enters or leaves the due set or its due
time really changes, never for a lease renewal. RUNNING: at or before the lease end. A claim keeps
a due time still ahead within the new lease (a READY turn's grace), and a heartbeat renews
``lease_until`` alone, so the sweep may find a running turn due while its runner is alive: it then
moves ``due_at`` to the lease end (:func:`look_later`: one write, once a lease at most) and does
nothing else; only a dead runner lets the lease end pass. READY: a short grace after the hand-off
(the resume invoke should claim it long before).
RETRYING: the retry time. PAUSED: the first pending item's expiry, if any. QUEUED turns are due
at once (the sweep starts them when their session frees up; until then it looks again after the
grace); FINISHED turns are never due.

Who moves what: the *request* (API route, magic link, Slack) creates turns, records decisions
(PAUSED -> READY), requests stops and finishes turns whose stop runs nothing; the *worker* (resume
Lambda, or the request that started the turn while it is within its time budget) claims and runs;
the *sweep* expires items (PAUSED -> READY) and re-invokes whatever is due.
"""

from __future__ import annotations

from dataclasses import replace

from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus

CLAIMABLE = (TurnStatus.READY, TurnStatus.RETRYING, TurnStatus.RUNNING, TurnStatus.QUEUED)


def _held(turn: TurnRecord, runner: str) -> bool:
    return turn.status is TurnStatus.RUNNING and turn.runner == runner


def _running(turn: TurnRecord, runner: str, now: float, until: float) -> TurnRecord:
    """Held by ``runner`` until ``until``; a due time still ahead and within the lease stays (no move)."""
    keep = turn.due_at is not None and now < turn.due_at <= until
    due = turn.due_at if keep else until
    return replace(turn, status=TurnStatus.RUNNING, runner=runner, lease_until=until, due_at=due)


def claim(
    turn: TurnRecord, runner: str, now: float, until: float, session_free: bool = True
) -> TurnRecord | None:
    """A worker takes the turn, holding its lease until ``until``.

    READY turns are claimable at once; RETRYING ones when their retry is due (or a stop was
    requested: the worker then only closes the turn); RUNNING ones only when their lease ran out
    (the runner died); QUEUED ones when their session is free.
    """
    if turn.status is TurnStatus.READY:
        return _running(turn, runner, now, until)
    if turn.status is TurnStatus.RETRYING:
        due = turn.due_at is None or turn.due_at <= now or turn.stop_requested is not None
        return _running(turn, runner, now, until) if due else None
    if turn.status is TurnStatus.RUNNING:
        return _running(turn, runner, now, until) if turn.lease_until <= now else None
    if turn.status is TurnStatus.QUEUED and session_free and turn.stop_requested is None:
        return _running(turn, runner, now, until)
    return None


def renew(turn: TurnRecord, runner: str, until: float) -> TurnRecord | None:
    """The runner's heartbeat: extend its lease (never shorten it); ``due_at`` stays (see above)."""
    if not _held(turn, runner) or until <= turn.lease_until:
        return None
    return replace(turn, lease_until=until)


def model_answered(turn: TurnRecord, runner: str, until: float) -> TurnRecord | None:
    """The model answered: reset the transient-failure count and renew the lease (``due_at`` stays)."""
    if not _held(turn, runner):
        return None
    return replace(turn, lease_until=max(until, turn.lease_until), model_failures=0)


def look_later(turn: TurnRecord, now: float) -> TurnRecord | None:
    """The sweep found a RUNNING turn due whose lease was renewed since: not due; look at its lease end.

    ``None`` when the turn is really due (its lease ran out) or not running: the sweep acts on it.
    """
    if turn.status is not TurnStatus.RUNNING or turn.lease_until <= now:
        return None
    if turn.due_at is not None and turn.due_at >= turn.lease_until:
        return None
    return replace(turn, due_at=turn.lease_until)


def record_verdicts(turn: TurnRecord, runner: str, fresh: dict[str, JsonDict]) -> TurnRecord | None:
    """Record gate verdicts for calls that have none yet (first write wins)."""
    missing = {k: v for k, v in fresh.items() if k not in turn.verdicts}
    if not missing or not _held(turn, runner):
        return None
    return replace(turn, verdicts={**turn.verdicts, **missing})


def pause(
    turn: TurnRecord, runner: str, checkpoint_id: str, stop: StopReason, due_at: float | None
) -> TurnRecord | None:
    """The batch waits for people: RUNNING -> PAUSED on ``checkpoint_id``; the lease is released."""
    if not _held(turn, runner) or turn.stop_requested is not None:
        return None
    return replace(
        turn,
        status=TurnStatus.PAUSED,
        stop_reason=stop,
        checkpoint_id=checkpoint_id,
        runner=None,
        lease_until=0.0,
        due_at=due_at,
    )


def wait_queued(turn: TurnRecord, due_at: float) -> TurnRecord | None:
    """A QUEUED turn whose session is still busy: the sweep looks at it again at ``due_at``.

    (Left due, blocked queued turns would fill every sweep's page and starve the turns behind them.)
    """
    if turn.status is not TurnStatus.QUEUED or (turn.due_at is not None and turn.due_at >= due_at):
        return None
    return replace(turn, due_at=due_at)


def handed_on(turn: TurnRecord, now: float, grace: float) -> TurnRecord | None:
    """The sweep handed a READY turn (or a RUNNING one whose lease ran out) on: look again after ``grace``.

    So a turn whose resume keeps failing moves to the back of the due index instead of holding its
    place at the front of every pass (a pass moves on a bounded batch). Its claim does not look at
    ``due_at``; a RETRYING turn's does, so it keeps its retry time.
    """
    lapsed = turn.status is TurnStatus.RUNNING and turn.lease_until <= now
    if not (turn.status is TurnStatus.READY or lapsed) or (turn.due_at is not None and turn.due_at > now):
        return None
    return replace(turn, due_at=now + grace)


def paused_due(turn: TurnRecord, checkpoint_id: str, due_at: float | None) -> TurnRecord | None:
    """Some items of the parked batch expired, others still wait: the next expiry is due."""
    if turn.status is not TurnStatus.PAUSED or turn.checkpoint_id != checkpoint_id:
        return None
    return replace(turn, due_at=due_at)


def ready(turn: TurnRecord, checkpoint_id: str, now: float, grace: float) -> TurnRecord | None:
    """The parked batch is complete (decided, expired or abandoned): PAUSED -> READY."""
    if turn.status is not TurnStatus.PAUSED or turn.checkpoint_id != checkpoint_id:
        return None
    return replace(turn, status=TurnStatus.READY, due_at=now + grace)


def hand_off(turn: TurnRecord, runner: str, now: float, grace: float) -> TurnRecord | None:
    """The runner's time budget is spent: release the lease so a worker claims the turn at once."""
    if not _held(turn, runner):
        return None
    return replace(turn, status=TurnStatus.READY, runner=None, lease_until=0.0, due_at=now + grace)


def retry_later(turn: TurnRecord, runner: str, at: float) -> TurnRecord | None:
    """A transient model error outlasted the in-call retries: wait durably until ``at``."""
    if not _held(turn, runner):
        return None
    return replace(
        turn,
        status=TurnStatus.RETRYING,
        runner=None,
        lease_until=0.0,
        due_at=at,
        model_failures=turn.model_failures + 1,
    )


def clear_checkpoint(turn: TurnRecord, runner: str) -> TurnRecord | None:
    """The batch's results are in the history: the turn no longer points at its checkpoint."""
    if not _held(turn, runner) or turn.checkpoint_id is None:
        return None
    return replace(turn, checkpoint_id=None)


def finish(turn: TurnRecord, runner: str | None, stop: StopReason, text: str | None) -> TurnRecord | None:
    """The turn ends for good (``runner`` None: a request finishing a turn that runs nothing)."""
    if turn.status is TurnStatus.FINISHED:
        return None
    if runner is not None and not _held(turn, runner):
        return None
    return replace(
        turn,
        status=TurnStatus.FINISHED,
        stop_reason=stop,
        text=text,
        checkpoint_id=None,
        runner=None,
        lease_until=0.0,
        due_at=None,
    )


def request_stop(turn: TurnRecord, reason: StopReason, now: float) -> TurnRecord | None:
    """Ask the turn to stop (cancelled, superseded): a queued turn never starts; others stop soon.

    RUNNING / READY / RETRYING: the worker stops at its next step boundary (a RETRYING turn becomes
    due at once). PAUSED: the caller abandons the checkpoint in the same write (:func:`stop_parked`).
    """
    if turn.status is TurnStatus.FINISHED or turn.stop_requested is not None:
        return None
    if turn.status is TurnStatus.QUEUED:
        return replace(
            turn, status=TurnStatus.FINISHED, stop_reason=reason, stop_requested=reason, due_at=None
        )
    if turn.status is TurnStatus.RETRYING:
        return replace(turn, stop_requested=reason, due_at=now)
    return replace(turn, stop_requested=reason)


def stop_parked(turn: TurnRecord, reason: StopReason, now: float, grace: float) -> TurnRecord | None:
    """Stop a PAUSED turn: its batch is abandoned in the same write, so it is READY to close."""
    if turn.status is not TurnStatus.PAUSED or turn.checkpoint_id is None:
        return None
    return replace(turn, status=TurnStatus.READY, stop_requested=reason, due_at=now + grace)


def stick(turn: TurnRecord, tool: str) -> TurnRecord | None:
    """A reviewer approved ``tool`` for the rest of the turn."""
    return None if tool in turn.sticky_tools else replace(turn, sticky_tools=(*turn.sticky_tools, tool))


def queue_behind(turn: TurnRecord) -> TurnRecord | None:
    """A message was queued behind this unfinished turn: its finish starts the next turn."""
    if turn.status is TurnStatus.FINISHED or turn.queued_behind:
        return None
    return replace(turn, queued_behind=True)
