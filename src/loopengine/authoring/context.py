"""What a tool may know about the call it runs: :class:`ToolContext`, and the call's idempotency key.

A tool asks for the context by annotating one parameter with ``ToolContext`` (the parameter's name does
not matter; a parameter merely *named* ``ctx`` gets nothing)::

    def charge(args: Charge, ctx: ToolContext) -> dict[str, Any]:
        ctx.check()                                    # raises ToolCancelled once the turn is stopped
        return payments.post(..., headers={"Idempotency-Key": ctx.idempotency_key}, timeout=ctx.remaining())

``idempotency_key`` is a pure function of (tenant, turn id, call id): the same for that call in every
process, every resume and every recovery, and different for every other call. An operator who holds a
call's ``unknown`` outcome computes it from the audit trail (``GET /turns/{id}`` shows the call's
``toolUseId``; its ``tool_outcome`` event carries the key itself) and asks the provider what happened.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from loopengine.domain.base.clock import Clock, SystemClock
from loopengine.domain.base.jsontypes import JsonDict

KEY_PREFIX = "le_"
"""Every idempotency key starts with this (then 40 hex digits: 160 bits of SHA-256)."""
DEFAULT_TOOL_TIMEOUT = 20.0
"""Seconds a tool may run when neither agent.yaml (``tool_timeouts:``) nor its Tool sets a timeout.

Under the API's 25 s budget, so a request runs a step of a tool with the default timeout itself."""
MAX_TOOL_TIMEOUT = 600.0
"""The longest timeout a tool may have: it must fit one invocation of the resume worker (900 s)."""


def idempotency_key(tenant: str, turn_id: str, call_id: str) -> str:
    """The idempotency key of call ``call_id`` of turn ``turn_id`` in ``tenant``: ``le_`` + 40 hex digits.

    Deterministic (no secret, no clock), so anyone holding the audit trail can recompute it; the inputs
    are JSON-encoded, so no two different triples share an encoding.
    """
    canonical = json.dumps(["loopengine.tool-call.v1", tenant, turn_id, call_id], separators=(",", ":"))
    return KEY_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:40]


class ToolCancelled(Exception):
    """Raised by :meth:`ToolContext.check` once the turn's stop was requested (cancelled or superseded)."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """The call a tool runs: whose, which, who approved it, until when, and whether to stop.

    ``decision`` is ``"approve"`` when a person approved this call (then ``decided_by``, ``decided_via``,
    ``decided_at`` and ``comment`` say who, through which channel, when and with what note) and
    ``"allow"`` when the rules let it run unasked. ``edited_by`` names the approver who changed the
    arguments before approving (``proposed_args`` holds what the model asked for; the tool gets the
    edited ones). ``deadline`` is when the call's ``timeout`` runs out (Unix seconds of the engine's
    clock); past it the call's outcome is recorded ``unknown``.
    """

    tenant: str
    agent: str
    session_id: str
    turn_id: str
    call_id: str
    tool: str
    idempotency_key: str
    timeout: float
    deadline: float
    decision: Literal["allow", "approve"] = "allow"
    decided_by: str | None = None
    decided_via: str | None = None
    decided_at: float | None = None
    comment: str | None = None
    edited_by: str | None = None
    proposed_args: JsonDict | None = None
    cancel_event: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)
    clock: Clock = field(default_factory=SystemClock, compare=False, repr=False)

    @classmethod
    def for_call(
        cls,
        *,
        turn_id: str,
        call_id: str,
        tool: str = "",
        tenant: str = "",
        agent: str = "",
        session_id: str = "",
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        clock: Clock | None = None,
        **approval: Any,
    ) -> ToolContext:
        """A context for one call (its key derived, its deadline from now); also for a tool's own tests.

        ``approval`` takes the approval fields (``decision``, ``decided_by``, ``edited_by``, ...).
        """
        clock = clock or SystemClock()
        return cls(
            tenant=tenant,
            agent=agent,
            session_id=session_id,
            turn_id=turn_id,
            call_id=call_id,
            tool=tool,
            idempotency_key=idempotency_key(tenant, turn_id, call_id),
            timeout=timeout,
            deadline=clock.now() + timeout,
            clock=clock,
            **approval,
        )

    @staticmethod
    def key_for(tenant: str, turn_id: str, call_id: str) -> str:
        """The idempotency key of any call (:func:`idempotency_key`): for an operator's lookup."""
        return idempotency_key(tenant, turn_id, call_id)

    @property
    def approved(self) -> bool:
        """A person approved this call (rather than the rules allowing it)."""
        return self.decision == "approve"

    @property
    def cancelled(self) -> bool:
        """The turn's stop was requested while this call ran: stop at the next safe point."""
        return self.cancel_event.is_set()

    def check(self) -> None:
        """Raise :class:`ToolCancelled` if the turn's stop was requested (call it before each effect)."""
        if self.cancel_event.is_set():
            raise ToolCancelled(f"the turn was stopped while {self.tool or 'this tool'} ran")

    def remaining(self) -> float:
        """Seconds until ``deadline`` (0 once it passed): a timeout to hand to a client."""
        return max(0.0, self.deadline - self.clock.now())
