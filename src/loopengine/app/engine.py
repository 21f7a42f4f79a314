"""The application service: what handlers, the dev server and the CLI call.

One :class:`Engine` per process wraps a :class:`~loopengine.app.runtime.Runtime`. Methods take plain
values and typed verdicts and return domain results; :mod:`loopengine.app.views` builds the
replies of DESIGN.md from them.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Literal

from loopengine.app import outcome, turn_events, usage
from loopengine.app.follow import follow as follow_turn
from loopengine.app.outcome import TurnOutcome
from loopengine.app.ports import Change
from loopengine.app.request import expiry, items, resolution, sessions, stop, waits
from loopengine.app.request.replay import replay
from loopengine.app.request.resolution import Decider, Resolution
from loopengine.app.runtime import Runtime
from loopengine.app.worker import resume, starts, sweep
from loopengine.authoring.agent import AgentConfig
from loopengine.domain.base.errors import (
    AlreadyExists,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
)
from loopengine.domain.base.ids import new_id, session_key
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.base.limits import MAX_MESSAGE_CHARS, MAX_WAIT_SECONDS
from loopengine.domain.decisions import ApprovalScope as ApprovalScope
from loopengine.domain.decisions import Reply, Verdict
from loopengine.domain.idempotency import claim
from loopengine.domain.messages import Message
from loopengine.domain.principals import OPERATOR
from loopengine.domain.tokens.context_window import Compaction
from loopengine.domain.tokens.metering import DailyUsage, Metered
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus

CLOSE_WAIT_SECONDS = 10.0
"""How long :meth:`Engine.close` waits for the resumes in flight by default."""
Trigger = Literal["message", "schedule"]


class Engine:
    """Start, resolve, resume, stop and inspect turns.

    A context manager: ``with build_engine(...) as engine:`` ends with :meth:`close`.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.sleep: Callable[[float], object] = threading.Event().wait  # long-poll pauses (real time)

    def close(self, timeout: float = CLOSE_WAIT_SECONDS) -> bool:
        """Wait up to ``timeout`` seconds for the work in flight, then close the stores.

        The work in flight is what the invoker runs in this process: an invoker with a
        ``close(timeout)`` method (``ThreadInvoker``) is asked to finish its resumes and take no
        more. Returns whether it did; a resume still running then keeps its own store connection
        (it is never closed under it) and what it leaves half done is the sweep's, as after a crash.
        Closing twice is harmless; the engine refuses store work afterwards (``StoreError``).
        """
        drain = getattr(self.rt.invoker, "close", None)
        idle = bool(drain(timeout)) if callable(drain) else True
        self.rt.stores.close()
        return idle

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send_message(
        self,
        agent: str,
        message: str,
        session_id: str | None = None,
        tenant: str | None = None,
        trigger: Trigger = "message",
        budget_seconds: float | None = None,
        sender: Decider | None = None,
        remaining_seconds: float | None = None,
        live: bool = False,
        idempotency_key: str | None = None,
    ) -> TurnOutcome:
        """Start a turn on ``message`` and run it until it pauses, finishes or runs out of budget.

        ``idempotency_key`` (a client's ``Idempotency-Key``): a retry of the same request answers
        the turn the first one created, as it stands now; the same key with another request is
        IdempotencyMismatch (see :mod:`loopengine.domain.idempotency`).

        ``live``: the sender is attached (``loopengine chat``): a pause's notifications wait the
        agent's ``live_wait`` for an inline decision before they go to the other channels.

        A session whose turn is parked follows the agent's ``on_new_message`` policy: ``supersede``
        abandons the wait (its items become ``unknown``, the old turn ends ``superseded``),
        ``reject`` answers 409 with the pending items, ``queue`` keeps the message until the parked
        turn finishes and returns a ``queued`` turn.

        Tenants: a ``tenant`` outside the sender's scope is 403; a sender scoped to one tenant who
        names none gets theirs; session ids are scoped by tenant. Superseding a parked turn whose
        items need approvers needs the same authority.

        The HTTP edge validates the request (:mod:`loopengine.app.api_models`); these are for libraries.
        """
        if not isinstance(message, str) or not message.strip():
            raise InvalidInput("message must be a non-empty string")
        if len(message) > MAX_MESSAGE_CHARS:
            raise InvalidInput(f"message is longer than {MAX_MESSAGE_CHARS} characters")
        if not isinstance(live, bool):
            raise InvalidInput("live must be true or false")
        who = sender or Decider("system", "message", kind=OPERATOR)
        config = self.rt.agents.get(agent)
        sid = session_id or new_id("ses_")
        store = self.rt.stores.turns
        named = tenant
        tenant = sessions.tenant_for(who, tenant)
        where = session_key(tenant, sid)  # the session within its tenant
        owner = store.session_owner(where) if session_id else None  # flat: one entry, not every turn
        sent = {"message": message, "sessionId": session_id, "tenant": named, "live": live}
        key = None if idempotency_key is None else claim(idempotency_key, tenant, f"agent:{agent}", sent)
        replayed = replay(self.rt, key)
        if replayed is not None:
            return replayed
        unfinished = store.unfinished_session_turns(where) if owner is not None else []
        active = sessions.active_turns(sid, config, tenant, owner, unfinished)
        start = starts.Start(config, sid, tenant, trigger, message, live, key, fresh=not session_id)
        if active and config.on_new_message == "queue":
            return starts.queue(self.rt, start, active)
        for earlier in active:
            self._make_way(config, earlier, who)
        return starts.run(self.rt, start, budget_seconds, remaining_seconds)

    def _make_way(self, config: AgentConfig, earlier: TurnRecord, sender: Decider) -> None:
        """Apply the on_new_message policy to an unfinished turn in the way of a new message."""
        stopping = earlier.status is TurnStatus.READY and earlier.stop_requested is StopReason.SUPERSEDED
        waiting = earlier.status in (TurnStatus.PAUSED, TurnStatus.RETRYING)
        if (waiting and config.on_new_message == "supersede") or stopping:
            self._check_stop_authority(earlier, sender, "supersede")
            stopped = self._stop(earlier.turn_id, StopReason.SUPERSEDED, sender)
            if stopped.status is not TurnStatus.FINISHED:  # a crash left it half-stopped: close it
                self.resume(earlier.turn_id)
                stopped = self.turn(earlier.turn_id)
            if stopped.status is TurnStatus.FINISHED:
                return
            raise Conflict(
                f"turn {earlier.turn_id} is finishing a call a reviewer approved; retry in a moment",
                details={"turnId": earlier.turn_id},
            )
        if earlier.status is TurnStatus.PAUSED:
            from loopengine.app import views  # the reply models: not in a worker's cold start

            items = [views.wire(views.pending_item(p)) for p in self.outcome(earlier.turn_id).pending]
            raise Conflict(
                f"session {earlier.session_id} has a parked turn {earlier.turn_id}; "
                "answer its pending items first (this agent's on_new_message is reject)",
                details={"turnId": earlier.turn_id, "pendingItems": items},
            )
        raise Conflict(
            f"session {earlier.session_id} has a {earlier.status.public()} turn {earlier.turn_id}; "
            "retry when it finishes or cancel it",
            details={"turnId": earlier.turn_id},
        )

    def resolve(self, pending_id: str, verdict: Verdict, decider: Decider) -> Resolution:
        """Decide a pending approval: an :class:`~loopengine.domain.decisions.Approval` or a ``Denial``.

        An approval's ``edited_args`` are checked against the tool's schema and re-gated.
        """
        return resolution.resolve_approval(self.rt, pending_id, verdict, decider)

    def answer(self, pending_id: str, reply: Reply, decider: Decider) -> Resolution:
        """Answer a pending question with a :class:`~loopengine.domain.decisions.Reply`."""
        return resolution.answer_question(self.rt, pending_id, reply, decider)

    def resume(
        self, turn_id: str, budget_seconds: float | None = None, remaining_seconds: float | None = None
    ) -> TurnOutcome | None:
        """The resume worker's entry: claim and advance; ``None`` for a duplicate or no-op."""
        return resume.resume_turn(self.rt, turn_id, budget_seconds, remaining_seconds)

    def cancel(self, turn_id: str, decider: Decider, idempotency_key: str | None = None) -> TurnRecord:
        """Stop a turn: parked or queued at once, running at its next step boundary.

        What was already sent is not unsaid: calls that ran keep their effects. A turn whose open
        items need approvers may be cancelled only by one who could decide them all (or the
        operator): cancelling abandons those items. A cancel is idempotent by nature; with an
        ``idempotency_key`` the key is remembered, and the same key for another turn is 422.
        """
        turn = self.turn(turn_id, decider)
        key = None
        if idempotency_key is not None:
            key = claim(idempotency_key, turn.tenant, f"cancel:{turn.agent}", {"turnId": turn_id})
            if replay(self.rt, key) is not None:
                return self.turn(turn_id, decider)
        self._check_stop_authority(turn, decider, "cancel")
        stopped = self._stop(turn_id, StopReason.CANCELLED, decider)
        if key is not None:
            with contextlib.suppress(AlreadyExists):  # a racing retry stored it first
                self.rt.stores.turns.commit(Change(turn_id, idempotency=key.record(turn_id, self.now())))
        return stopped

    def _stop(self, turn_id: str, reason: StopReason, who: Decider) -> TurnRecord:
        """Record the stop (the request's write); a ready turn left stopping is closed by a worker now."""
        stopped = stop.request_stop(self.rt, turn_id, reason, who.decided_by())
        if stop.needs_closing(self.rt, stopped):
            resume.resume_turn(self.rt, turn_id)  # closes the batch and finishes; nothing runs
            return self.turn(turn_id)
        return stopped

    def _check_stop_authority(self, turn: TurnRecord, who: Decider, what: str) -> None:
        if who.operator:
            return
        for item in self.outcome(turn.turn_id).pending:
            if not who.may_approve(item.approvers):
                raise Forbidden(
                    f"{who.id} may not {what} turn {turn.turn_id}: its item {item.pending_id} "
                    f"may only be decided by {', '.join(item.approvers)}"
                )

    def sweep(self) -> sweep.SweepResult:
        """Find every stalled turn and move it on; resend due notifications (see ``sweep.sweep``)."""
        return sweep.sweep(self.rt)

    def expire(self, turn_id: str) -> int:
        """Apply the expiry policy to the turn's items past their deadline now (as the sweep would)."""
        return expiry.expire_due(self.rt, self.turn(turn_id))

    def turn(self, turn_id: str, who: Decider | None = None) -> TurnRecord:
        """Read a turn (NotFound if unknown, or of a tenant ``who`` cannot see)."""
        turn = self.rt.stores.turns.get_turn(turn_id)
        if turn is None or (who is not None and not who.sees(turn.tenant)):
            raise NotFound(f"no turn {turn_id!r}")
        return turn

    def item(self, pending_id: str, who: Decider | None = None, settle: bool = False) -> items.ItemView:
        """One pending item, its turn, tool and fate (see :func:`loopengine.app.request.items.view`)."""
        return items.view(self.rt, pending_id, who, settle)

    def now(self) -> float:
        """The engine's clock (what deadlines and link expiries are measured against)."""
        return self.rt.stores.clock.now()

    def outcome(self, turn_id: str) -> TurnOutcome:
        """The turn's current outcome, with its open pending items."""
        return outcome.outcome(self.rt, turn_id)

    def audit(self, turn_id: str, who: Decider | None = None) -> list[JsonDict]:
        """The turn's audit trail, oldest first (NotFound if the turn is unknown)."""
        self.turn(turn_id, who)
        return self.rt.stores.turns.events(turn_id)

    def events(
        self, turn_id: str, after: int = 0, wait: float = 0.0, who: Decider | None = None
    ) -> tuple[list[JsonDict], int, bool]:
        """The turn's events after ``after`` (long-polled up to ``wait`` seconds; see ``turn_events``).

        Returns the events (each with its ``seq``), the ``next`` cursor, and whether the turn had
        finished before they were read (then its ``finished`` event is among the events up to
        ``next``: a client may stop). NotFound for an unknown turn or one of a tenant ``who``
        cannot see.
        """
        turn = self.turn(turn_id, who)  # read before the events: finished here means all are there
        read = functools.partial(self.rt.stores.turns.events, turn_id)
        finished = turn.status is TurnStatus.FINISHED
        wait = 0.0 if finished else min(wait, MAX_WAIT_SECONDS)  # nothing more to wait for
        with waits.slot(self.rt, who, wait):
            found, cursor = turn_events.poll(read, after, wait, self.sleep)
        return found, cursor, finished

    follow = follow_turn
    """The turn's events as they happen, model text piece by piece: :func:`loopengine.app.follow.follow`."""

    def open_items(
        self, agent: str | None = None, tenant: str | None = None, who: Decider | None = None
    ) -> list[JsonDict]:
        """Open pending items (the poll surface) of the tenants ``who`` sees: see :func:`items.open_items`."""
        from loopengine.app import views  # the reply models: not in a worker's cold start

        return [
            views.wire(views.listed_item(cp, item))
            for cp, item in items.open_items(self.rt, agent, tenant, who)
        ]

    def history(
        self, session_id: str, who: Decider | None = None, tenant: str | None = None
    ) -> list[Message]:
        """A session's durable history within ``tenant`` (default: the caller's, as a message's).

        NotFound for an unknown session; another tenant's session of the same id is another session.
        """
        scope = sessions.tenant_for(who or Decider("system", "read", kind=OPERATOR), tenant)
        messages = self.rt.stores.sessions.load(session_key(scope, session_id))
        if not messages:
            raise NotFound(f"no session {session_id!r}")
        return messages

    def session_bill(
        self, session_id: str, who: Decider | None = None, tenant: str | None = None
    ) -> tuple[list[Compaction], Metered]:
        """A session's compaction markers and what its model calls used (scoped as :meth:`history`)."""
        scope = sessions.tenant_for(who or Decider("system", "read", kind=OPERATOR), tenant)
        return usage.session_bill(self.rt.stores, session_key(scope, session_id))

    def usage(
        self,
        tenant: str | None = None,
        agent: str | None = None,
        day: str | None = None,
        who: Decider | None = None,
    ) -> list[DailyUsage]:
        """Per tenant, agent and UTC day, within the tenants ``who`` sees: see :func:`usage.daily`."""
        return usage.daily(self.rt.stores, who, tenant, agent, day)

    def session_turns(
        self, session_id: str, who: Decider | None = None, tenant: str | None = None
    ) -> list[TurnRecord]:
        """A session's turns within ``tenant`` (as :meth:`history` scopes it), oldest first."""
        scope = sessions.tenant_for(who or Decider("system", "read", kind=OPERATOR), tenant)
        return self.rt.stores.turns.session_turns(session_key(scope, session_id))

    def agent(self, name: str) -> AgentConfig:
        """Agent ``name``'s current config: NotFound if there is none, AgentUnavailable if it is broken."""
        return self.rt.agents.get(name)

    def wait(self, turn_id: str, seconds: float, who: Decider | None = None) -> TurnOutcome:
        """Wait up to ``seconds`` while the turn is working (a pause or the finish ends it): its outcome.

        Holds one of ``who``'s long-poll slots meanwhile (TooManyWaits beyond the limit).
        """
        with waits.slot(self.rt, who, seconds):
            return waits.outcome_within(self.rt, turn_id, seconds)
