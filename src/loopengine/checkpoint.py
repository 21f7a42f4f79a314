"""TurnCheckpoint: a paused batch, and its transitions (pure functions, no I/O).

Shape (seed 000 "Worked example"): ``resultsSoFar`` holds the results of calls that already ran;
``outstanding`` maps each pendingId to what it waits for. One more map, ``inflight``, holds items a
human approved whose tool is running right now: the item left ``outstanding`` (a second click is
``alreadyResolved``) but its result is not in yet.

    outstanding --approve--> inflight --result--> resultsSoFar
    outstanding --answer---------------------> resultsSoFar
    outstanding --deny-----> resultsSoFar (denied) + every other outstanding item skipped, closed

``closed`` means nothing is left to decide; the batch is *complete* once it is closed and nothing
is in flight. Exactly one compare-and-set makes it complete; that writer finishes the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from loopengine import outcomes
from loopengine.messages import ToolResultBlock, block_from_dict

Kind = Literal["approval", "question"]
JsonDict = dict[str, Any]


@dataclass(frozen=True)
class PendingItem:
    """One call waiting for a human."""

    pending_id: str
    tool_use_id: str
    tool: str
    args: JsonDict
    reason: str
    kind: Kind
    args_hash: str
    approvers: tuple[str, ...] = ()
    expires_at: float | None = None
    on_expiry: str = "unknown"

    def to_dict(self) -> JsonDict:
        """Stored (camelCase) form."""
        return {
            "expiresAt": self.expires_at,
            "onExpiry": self.on_expiry,
            "pendingId": self.pending_id,
            "toolUseId": self.tool_use_id,
            "tool": self.tool,
            "args": self.args,
            "reason": self.reason,
            "kind": self.kind,
            "argsHash": self.args_hash,
            "approvers": list(self.approvers),
        }

    @staticmethod
    def from_dict(d: JsonDict) -> PendingItem:
        """Parse the stored form."""
        return PendingItem(
            pending_id=d["pendingId"],
            tool_use_id=d["toolUseId"],
            tool=d["tool"],
            args=d["args"],
            reason=d["reason"],
            kind=d.get("kind", "approval"),
            args_hash=d.get("argsHash", ""),
            approvers=tuple(d.get("approvers") or ()),
            expires_at=d.get("expiresAt"),
            on_expiry=d.get("onExpiry", "unknown"),
        )


@dataclass(frozen=True)
class TurnCheckpoint:
    """A paused batch; see the module docstring."""

    id: str
    turn_id: str
    session_id: str
    agent: str
    tenant: str
    results_so_far: tuple[ToolResultBlock, ...]
    outstanding: dict[str, PendingItem]
    created_at: float
    inflight: dict[str, PendingItem] = field(default_factory=dict)
    closed: bool = False
    denied: bool = False
    decisions: tuple[JsonDict, ...] = ()
    version: int = 0

    @property
    def complete(self) -> bool:
        """Closed and nothing running: the batch's results are all in."""
        return self.closed and not self.inflight

    @property
    def pending_ids(self) -> list[str]:
        """Every pendingId this checkpoint ever handed out."""
        return [d["pendingId"] for d in self.decisions] + list(self.outstanding)

    def to_dict(self) -> JsonDict:
        """Stored (camelCase) form."""
        return {
            "id": self.id,
            "turnId": self.turn_id,
            "sessionId": self.session_id,
            "agent": self.agent,
            "tenant": self.tenant,
            "resultsSoFar": [b.to_dict() for b in self.results_so_far],
            "outstanding": {k: v.to_dict() for k, v in self.outstanding.items()},
            "inflight": {k: v.to_dict() for k, v in self.inflight.items()},
            "closed": self.closed,
            "denied": self.denied,
            "decisions": list(self.decisions),
            "createdAt": self.created_at,
            "version": self.version,
        }

    @staticmethod
    def from_dict(d: JsonDict) -> TurnCheckpoint:
        """Parse the stored form."""
        results = []
        for raw in d.get("resultsSoFar", []):
            block = block_from_dict(raw)
            assert isinstance(block, ToolResultBlock)
            results.append(block)
        return TurnCheckpoint(
            id=d["id"],
            turn_id=d["turnId"],
            session_id=d["sessionId"],
            agent=d["agent"],
            tenant=d.get("tenant", ""),
            results_so_far=tuple(results),
            outstanding={k: PendingItem.from_dict(v) for k, v in d["outstanding"].items()},
            inflight={k: PendingItem.from_dict(v) for k, v in d.get("inflight", {}).items()},
            closed=bool(d.get("closed", False)),
            denied=bool(d.get("denied", False)),
            decisions=tuple(d.get("decisions", [])),
            created_at=float(d["createdAt"]),
            version=int(d.get("version", 0)),
        )


def _decision(item: PendingItem, decision: str, by: JsonDict, at: float, **extra: Any) -> JsonDict:
    record = {"pendingId": item.pending_id, "tool": item.tool, "decision": decision, "at": at}
    record.update(by)
    record.update({k: v for k, v in extra.items() if v is not None})
    return record


def claim_approval(
    cp: TurnCheckpoint, item: PendingItem, args: JsonDict, by: JsonDict, at: float, edited: bool
) -> TurnCheckpoint:
    """Approve ``item``: it moves to ``inflight`` with the args that will actually run."""
    outstanding = {k: v for k, v in cp.outstanding.items() if k != item.pending_id}
    running = replace(item, args=args)
    decision = _decision(item, "approve", by, at, editedArgs=args if edited else None)
    return replace(
        cp,
        outstanding=outstanding,
        inflight={**cp.inflight, item.pending_id: running},
        closed=not outstanding,
        decisions=(*cp.decisions, decision),
    )


def add_result(cp: TurnCheckpoint, pending_id: str, result: ToolResultBlock) -> TurnCheckpoint:
    """The approved call ``pending_id`` finished (or its outcome is unknown): store its result."""
    inflight = {k: v for k, v in cp.inflight.items() if k != pending_id}
    return replace(cp, inflight=inflight, results_so_far=(*cp.results_so_far, result))


def answer(cp: TurnCheckpoint, item: PendingItem, text: str, by: JsonDict, at: float) -> TurnCheckpoint:
    """Record the user's answer to a question."""
    outstanding = {k: v for k, v in cp.outstanding.items() if k != item.pending_id}
    return replace(
        cp,
        outstanding=outstanding,
        results_so_far=(*cp.results_so_far, outcomes.answered(item.tool_use_id, text)),
        closed=not outstanding,
        decisions=(*cp.decisions, _decision(item, "answer", by, at, answer=text)),
    )


def deny(
    cp: TurnCheckpoint, item: PendingItem, comment: str | None, by: JsonDict, at: float
) -> TurnCheckpoint:
    """Deny ``item``: close at once, every other outstanding item gets a ``skipped`` result."""
    results = [outcomes.denied(item.tool_use_id, "a human reviewer denied this call", comment)]
    decisions = [_decision(item, "deny", by, at, comment=comment)]
    for other in cp.outstanding.values():
        if other.pending_id != item.pending_id:
            results.append(outcomes.skipped(other.tool_use_id))
            decisions.append(_decision(other, "skipped", {"decidedBy": "cascade"}, at))
    return replace(
        cp,
        outstanding={},
        results_so_far=(*cp.results_so_far, *results),
        closed=True,
        denied=True,
        decisions=(*cp.decisions, *decisions),
    )


def expire(cp: TurnCheckpoint, item: PendingItem, at: float, waited: str) -> TurnCheckpoint:
    """Nobody answered ``item`` in time: record the policy's outcome (never "failed")."""
    outstanding = {k: v for k, v in cp.outstanding.items() if k != item.pending_id}
    why = f"nobody answered within {waited}"
    if item.on_expiry == "deny":
        result = outcomes.denied(item.tool_use_id, f"{why}; the agent's policy treats that as a denial")
    else:
        result = outcomes.unknown(item.tool_use_id, f"{why}; the call did not run")
    decision = _decision(
        item, "expired", {"decidedBy": "policy", "channel": "expiry"}, at, onExpiry=item.on_expiry
    )
    return replace(
        cp,
        outstanding=outstanding,
        results_so_far=(*cp.results_so_far, result),
        closed=not outstanding,
        decisions=(*cp.decisions, decision),
    )


def abandon(cp: TurnCheckpoint, why: str, by: JsonDict, at: float) -> TurnCheckpoint:
    """Close without a decision (superseded, cancelled, expired): open items become ``unknown``."""
    results = [outcomes.unknown(i.tool_use_id, why) for i in cp.outstanding.values()]
    decisions = [_decision(i, "abandoned", by, at, why=why) for i in cp.outstanding.values()]
    return replace(
        cp,
        outstanding={},
        results_so_far=(*cp.results_so_far, *results),
        closed=True,
        decisions=(*cp.decisions, *decisions),
    )
