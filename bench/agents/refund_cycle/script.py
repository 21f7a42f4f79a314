"""The scripted model of the common scenario: lookup_order and issue_refund in one answer, then a reply.

The first answer asks for both calls at once (the lookup is allowed and runs, the refund is gated and
pends, so the turn pauses with the lookup's result kept); once both results are in, one closing
sentence, honest when the refund did not go through. It reads the conversation only, so a resumed
turn continues correctly. bench/peers/langgraph_cycle.py scripts LangGraph's model with the same
two answers.
"""

from __future__ import annotations

import json
from typing import Any

from loopengine import ModelRequest, ModelResponse, TextBlock, ToolUseBlock

LOOKUP = {"order_id": "A-1001"}
REFUND = {"order_id": "A-1001", "amount": 212.0, "reason": "arrived broken"}
"""The calls' arguments (order A-1001 of customer-service's orders.json, total 212.00)."""


def respond(request: ModelRequest) -> ModelResponse:
    """Next response for the conversation in ``request``."""
    history = request.messages
    start = max(i for i, m in enumerate(history) if m.role == "user" and m.text)
    names = {u.id: u.name for m in history[start + 1 :] for u in m.tool_uses}
    results: dict[str, Any] = {}
    for m in history[start + 1 :]:
        for r in m.tool_results:
            try:
                results[names.get(r.tool_use_id, "?")] = json.loads(r.content)
            except ValueError:
                results[names.get(r.tool_use_id, "?")] = {"status": "error"}
    if not results:
        n = len(history)
        calls: tuple[tuple[str, dict[str, Any]], ...] = (("lookup_order", LOOKUP), ("issue_refund", REFUND))
        blocks = tuple(
            ToolUseBlock(id=f"toolu_{n:03d}_{i}", name=k, input=a) for i, (k, a) in enumerate(calls)
        )
        return ModelResponse(content=blocks, stop_reason="tool_use")
    refund = results.get("issue_refund")
    if not isinstance(refund, dict) or refund.get("status") != "issued":
        text = f"I could not refund order {REFUND['order_id']}."
    else:
        text = f"Done: order {REFUND['order_id']} was refunded ({float(refund['amount']):.2f} USD)."
    return ModelResponse(content=(TextBlock(text),), stop_reason="end_turn")
