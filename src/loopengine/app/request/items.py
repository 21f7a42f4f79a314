"""One pending item as a channel sees it: the item (if open), its turn, its tool and its fate.

The magic-link pages, the Slack and Lark callbacks and the inbox read items through here (by way of
:meth:`loopengine.app.engine.Engine.item`), never through the stores.
"""

from __future__ import annotations

from dataclasses import dataclass

from loopengine.app.request import expiry
from loopengine.app.runtime import Runtime
from loopengine.authoring.mcp import McpPin
from loopengine.authoring.tools import Tool
from loopengine.domain.base.errors import NotFound
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint
from loopengine.domain.fate import Fate, FateState, item_fate
from loopengine.domain.principals import Principal, tenants_to_list
from loopengine.domain.turns import StopReason, TurnRecord


@dataclass(frozen=True, slots=True)
class ItemView:
    """What is known about one pendingId (see :func:`view`)."""

    pending_id: str
    checkpoint: TurnCheckpoint | None
    turn: TurnRecord | None
    fate: Fate
    tool: Tool | None = None
    mcp: McpPin | None = None
    """For a tool of an MCP server: its server and the server's name for it (as the turn pinned them)."""

    @property
    def item(self) -> PendingItem | None:
        """The item while it is open (not decided, not past its deadline)."""
        if not self.fate.open or self.checkpoint is None:
            return None
        return self.checkpoint.outstanding.get(self.pending_id)


def view(rt: Runtime, pending_id: str, who: Principal | None = None, settle: bool = False) -> ItemView:
    """The item ``pending_id`` as ``who`` may see it (NotFound for another tenant's, or another item's link).

    With ``settle`` (a POST), an item past its deadline whose expiry is not recorded yet is recorded
    now (:func:`loopengine.app.request.expiry.expire_due`), so its fate is final; a GET never settles.
    """
    cp = rt.stores.checkpoints.find_by_pending(pending_id)
    if cp is not None and who is not None and not who.sees_item(cp.tenant, pending_id):
        raise NotFound(f"no pending item {pending_id!r}")
    turn = rt.stores.turns.get_turn(cp.turn_id) if cp is not None else None
    fate = item_fate(cp, _stop(turn), pending_id, rt.stores.clock.now())
    if settle and fate.state is FateState.EXPIRED and fate.decision is None and turn is not None:
        expiry.expire_due(rt, turn)
        return view(rt, pending_id, who)
    return ItemView(pending_id, cp, turn, fate, *_tool(rt, cp, turn, pending_id))


def _stop(turn: TurnRecord | None) -> StopReason | None:
    return (turn.stop_reason or turn.stop_requested) if turn is not None else None


def _tool(
    rt: Runtime, cp: TurnCheckpoint | None, turn: TurnRecord | None, pending_id: str
) -> tuple[Tool | None, McpPin | None]:
    """The item's tool as the turn's config snapshot describes it, and its MCP pin (None when unavailable)."""
    if cp is None or turn is None:
        return None, None
    item = cp.outstanding.get(pending_id) or cp.approved.get(pending_id)
    if item is None:
        return None, None
    try:
        config = rt.config_of(turn)
    except NotFound:
        return None, None
    return config.tool(item.tool), config.mcp_pins.get(item.tool)


def open_items(
    rt: Runtime, agent: str | None, tenant: str | None, who: Principal | None
) -> list[tuple[TurnCheckpoint, PendingItem]]:
    """Open pending items (the poll surface), oldest checkpoint first, of the tenants ``who`` sees.

    A ``tenant`` outside the caller's scope is 403; without one, every tenant of the caller (the
    operator, who is in every tenant, names one; else the default tenant ``""``). Each store
    query is bounded to one tenant by construction.
    """
    tenants = tenants_to_list(who, tenant, "act in")
    found = [cp for t in tenants for cp in rt.stores.checkpoints.list_open(agent=agent, tenant=t)]
    found.sort(key=lambda cp: (cp.created_at, cp.id))
    return [
        (cp, item)
        for cp in found
        for item in cp.outstanding.values()
        if who is None or who.sees_item(cp.tenant, item.pending_id)
    ]
