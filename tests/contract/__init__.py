"""The store contract suite: one set of tests every store adapter must pass unchanged.

Builders for the records the tests store live here, so test modules (and the worker processes of
the concurrency tests, which import them by name) share one way of making valid records.
"""

from __future__ import annotations

from typing import Any

from loopengine.domain.base.ids import new_id
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint
from loopengine.domain.messages import ToolResultBlock
from loopengine.domain.turns import CallRecord, TurnRecord

T0 = 1_800_000_000.0


def item(pending_id: str | None = None, kind: str = "approval", **args: Any) -> PendingItem:
    """A pending item with fresh ids; ``args`` become the call's arguments."""
    return PendingItem(
        pending_id=pending_id or new_id("p_"),
        tool_use_id=new_id("toolu_"),
        tool="issue_refund" if kind == "approval" else "system_ask_user",
        args=args or {"order_id": "A-1001", "amount": 212.0, "reason": "arrived broken"},
        reason="rule: default_decision ask",
        kind="approval" if kind == "approval" else "question",
        args_hash=new_id("h_"),
        approvers=("ops@example.com",),
    )


def checkpoint(
    *items: PendingItem,
    agent: str = "customer-service",
    tenant: str = "acme",
    created_at: float = T0,
    **fields: Any,
) -> TurnCheckpoint:
    """A fresh open checkpoint holding ``items`` (one approval item if none are given)."""
    outstanding = {i.pending_id: i for i in (items or (item(),))}
    fields.setdefault("results_so_far", (ToolResultBlock(new_id("toolu_"), '{"status":"ok"}'),))
    fields.setdefault("turn_id", new_id("turn_"))
    return TurnCheckpoint(
        id=new_id("cp_"),
        session_id=new_id("s_"),
        agent=agent,
        tenant=tenant,
        outstanding=outstanding,
        created_at=created_at,
        **fields,
    )


def turn(session_id: str | None = None, created_at: float = T0, **fields: Any) -> TurnRecord:
    """A fresh running turn."""
    return TurnRecord(
        turn_id=new_id("turn_"),
        session_id=session_id or new_id("s_"),
        agent="customer-service",
        tenant="acme",
        config_hash=new_id("cfg_"),
        start_seq=0,
        created_at=created_at,
        **fields,
    )


def call(turn_id: str, tool_use_id: str | None = None, started_at: float = T0) -> CallRecord:
    """A started (not yet finished) call record."""
    return CallRecord(
        turn_id=turn_id,
        tool_use_id=tool_use_id or new_id("toolu_"),
        tool="lookup_order",
        started_at=started_at,
    )
