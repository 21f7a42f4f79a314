"""The application service: what handlers, the dev server and the CLI call.

One :class:`Engine` per process wraps a :class:`~loopengine.runtime.Runtime`. Methods take plain
values and return domain results; :mod:`loopengine.views` turns those into the JSON of DESIGN.md.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from loopengine import resolution
from loopengine.errors import Conflict, InvalidInput, NotFound, VersionConflict
from loopengine.ids import new_id
from loopengine.loop import TurnOutcome, advance, outcome_of
from loopengine.messages import Message
from loopengine.resolution import Decider, Resolution
from loopengine.runtime import Runtime
from loopengine.turns import StopReason, TurnRecord, TurnStatus

JsonDict = dict[str, Any]
MAX_MESSAGE_CHARS = 100_000


class Engine:
    """Start, resolve, resume and inspect turns."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    def send_message(
        self,
        agent: str,
        message: Any,
        session_id: str | None = None,
        tenant: str = "",
        trigger: str = "message",
        budget_seconds: float | None = None,
    ) -> TurnOutcome:
        """Start a turn on ``message`` and run it until it pauses, finishes or runs out of budget."""
        if not isinstance(message, str) or not message.strip():
            raise InvalidInput("message must be a non-empty string")
        if len(message) > MAX_MESSAGE_CHARS:
            raise InvalidInput(f"message is longer than {MAX_MESSAGE_CHARS} characters")
        rt, clock = self.rt, self.rt.stores.clock
        config = rt.agents.get(agent)
        sid = session_id or new_id("ses_")
        for earlier in rt.stores.turns.session_turns(sid):
            if earlier.agent != config.name:
                raise Conflict(f"session {sid} belongs to agent {earlier.agent!r}")
            if earlier.status is not TurnStatus.FINISHED:
                raise Conflict(f"session {sid} has a {earlier.status.value} turn {earlier.turn_id}")
        history = rt.stores.sessions.load(sid)
        config_hash = config.config_hash()
        rt.stores.turns.put_config(config_hash, config.snapshot())
        now = clock.now()
        turn = TurnRecord(
            turn_id=new_id("trn_"),
            session_id=sid,
            agent=config.name,
            tenant=tenant,
            config_hash=config_hash,
            start_seq=len(history),
            created_at=now,
            trigger=trigger,
            lease_until=now + rt.lease_seconds,
        )
        rt.stores.turns.create_turn(turn)
        try:
            rt.stores.sessions.append(sid, [Message.user_text(message)], len(history))
        except VersionConflict:
            rt.stores.turns.replace_turn(
                replace(turn, status=TurnStatus.FINISHED, stop_reason=StopReason.ERROR)
            )
            raise Conflict(f"session {sid} changed while this message arrived; retry") from None
        rt.event(turn.turn_id, "started", trigger=trigger, configHash=config_hash)
        payload = {"turnId": turn.turn_id, "sessionId": sid, "agent": config.name}
        rt.notify(config, turn.turn_id, "run_start", {**payload, "tenant": tenant, "trigger": trigger})
        return advance(rt, turn.turn_id, self._deadline(budget_seconds))

    def resolve(
        self,
        pending_id: str,
        decision: Any,
        decider: Decider,
        edited_args: Any = None,
        comment: Any = None,
        args_hash: Any = None,
    ) -> Resolution:
        """Approve or deny a pending approval."""
        if comment is not None and not isinstance(comment, str):
            raise InvalidInput("comment must be a string")
        if args_hash is not None and not isinstance(args_hash, str):
            raise InvalidInput("argsHash must be a string")
        return resolution.resolve_approval(
            self.rt, pending_id, decision, decider, edited_args, comment, args_hash
        )

    def answer(self, pending_id: str, answer: Any, decider: Decider) -> Resolution:
        """Answer a pending question."""
        return resolution.answer_question(self.rt, pending_id, answer, decider)

    def resume(self, turn_id: str, budget_seconds: float | None = None) -> TurnOutcome | None:
        """The resume worker's entry: claim and advance; ``None`` for a duplicate or no-op."""
        return resolution.resume_turn(self.rt, turn_id, self._deadline(budget_seconds))

    def turn(self, turn_id: str) -> TurnRecord:
        """Read a turn (NotFound if unknown)."""
        turn = self.rt.stores.turns.get_turn(turn_id)
        if turn is None:
            raise NotFound(f"no turn {turn_id!r}")
        return turn

    def outcome(self, turn_id: str) -> TurnOutcome:
        """The turn's current outcome, with its open pending items."""
        turn = self.turn(turn_id)
        pending = []
        if turn.status is TurnStatus.PAUSED and turn.checkpoint_id:
            cp = self.rt.stores.checkpoints.get(turn.checkpoint_id)
            if cp is not None and not cp.closed:
                pending = list(cp.outstanding.values())
        return outcome_of(turn, pending)

    def wait(self, turn_id: str, seconds: float, past_checkpoint: str | None = None) -> TurnOutcome:
        """Wait up to ``seconds`` (real time) for the turn to stop running; return its outcome.

        ``past_checkpoint``: a turn still parked on that (now complete) checkpoint has not been
        resumed yet, so keep waiting for it too.
        """
        pause = threading.Event()
        step, waited = 0.02, 0.0
        while True:
            out = self.outcome(turn_id)
            parked_before = out.status is TurnStatus.PAUSED and (
                past_checkpoint is not None and self.turn(turn_id).checkpoint_id == past_checkpoint
            )
            if (out.status is not TurnStatus.RUNNING and not parked_before) or waited >= seconds:
                return out
            pause.wait(step)
            waited += step
            step = min(step * 2, 0.25)

    def _deadline(self, budget_seconds: float | None) -> float | None:
        if budget_seconds is None:
            return None
        return self.rt.stores.clock.now() + budget_seconds
