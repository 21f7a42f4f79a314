"""The offline brain of customer-service: a deterministic stand-in for the model.

Used when ``LOOPENGINE_MODEL=scripted`` or no ``ANTHROPIC_API_KEY`` is set. It reads the
conversation (never hidden state), so a turn resumed in another process continues correctly:

- a message naming an order (``A-1234``) -> ``lookup_order``; no order id -> ``system_ask_user``
- an order that arrived broken -> ``issue_refund`` for its total, then a ``send_email`` with
  intent ``refund``; with "right away" in the message both go out in one batch
- an order that is fine -> a ``tracking_info`` email (auto-allowed)
- a denied, skipped or unknown result -> an honest final reply saying so
"""

from __future__ import annotations

import json
import re
from typing import Any

from loopengine import Message, ModelRequest, ModelResponse, TextBlock, ToolUseBlock

ORDER_ID = re.compile(r"\b[A-Z]-\d{4}\b")


def respond(request: ModelRequest) -> ModelResponse:
    """Next response for the conversation in ``request``."""
    history = request.messages
    start = max(i for i, m in enumerate(history) if m.role == "user" and m.text)
    ask = history[start].text
    calls = _calls(history[start + 1 :])  # results in the user's own message answer an earlier turn
    n = len(history)

    bad = [c for c in calls if c["status"] in ("denied", "skipped", "unknown", "error")]
    if bad:
        return _say(_honest(bad, calls))
    answer = next((c["result"] for c in calls if c["name"] == "system_ask_user"), None)
    order_id = _order_id(ask) or _order_id(answer or "")
    if order_id is None:
        return _use(n, ("system_ask_user", {"question": "Which order is this about?"}))
    order = _result(calls, "lookup_order")
    if order is None:
        return _use(n, ("lookup_order", {"order_id": order_id}))
    if "error" in order:
        return _say(f"I could not find order {order_id}. Could you double-check the number?")
    to = order["customer"]
    if order.get("issue") != "arrived broken":
        body = f"Your order {order_id} is {order['status']}; tracking number {order['tracking']}."
        if _result(calls, "send_email") is None:
            return _use(n, ("send_email", _email(to, body, "tracking_info")))
        return _say(f"I emailed {to} the tracking details for {order_id}.")
    refund = _result(calls, "issue_refund")
    email = _result(calls, "send_email")
    amount = float(order["total"])
    refund_args = {"order_id": order_id, "amount": amount, "reason": "arrived broken"}
    body = f"We are sorry order {order_id} arrived broken. We refunded {amount:.2f} USD."
    if refund is None and "right away" in ask.lower():
        return _use(n, ("issue_refund", refund_args), ("send_email", _email(to, body, "refund")))
    if refund is None:
        return _use(n, ("issue_refund", refund_args))
    if email is None:
        paid = float(refund.get("amount", amount))
        body = f"We are sorry order {order_id} arrived broken. We refunded {paid:.2f} USD."
        return _use(n, ("send_email", _email(to, body, "refund")))
    return _say(
        f"Done: order {order_id} was refunded ({refund['refund_id']}, "
        f"{float(refund['amount']):.2f} USD) and {to} has a confirmation email."
    )


def _calls(messages: list[Message]) -> list[dict[str, Any]]:
    """Every tool call since the user's message, with its parsed result and status."""
    uses = {u.id: u for m in messages for u in m.tool_uses}
    out = []
    for m in messages:
        for r in m.tool_results:
            use = uses.get(r.tool_use_id)
            try:
                parsed: Any = json.loads(r.content)
            except ValueError:
                parsed = r.content
            status = parsed.get("status", "ok") if isinstance(parsed, dict) else "ok"
            if isinstance(parsed, dict) and "reviewer_edited_args" in parsed:
                parsed = parsed["result"]
            out.append({"name": use.name if use else "?", "status": status, "result": parsed})
    return out


def _result(calls: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    found = [c["result"] for c in calls if c["name"] == name and isinstance(c["result"], dict)]
    return found[-1] if found else None


def _order_id(text: str) -> str | None:
    match = ORDER_ID.search(text) if isinstance(text, str) else None
    return match.group(0) if match else None


def _email(to: str, body: str, intent: str) -> dict[str, Any]:
    return {"to": to, "subject": "About your order", "body": body, "intent": intent}


def _honest(bad: list[dict[str, Any]], calls: list[dict[str, Any]]) -> str:
    done = [c["name"] for c in calls if c["status"] == "ok" and c["name"] != "lookup_order"]
    parts = []
    for c in bad:
        comment = c["result"].get("comment") if isinstance(c["result"], dict) else None
        why = f" (reviewer: {comment})" if comment else ""
        parts.append(f"{c['name']} was {c['status']}{why}")
    tail = f" What did go through: {', '.join(done)}." if done else ""
    return "I could not finish: " + "; ".join(parts) + "." + tail


def _use(n: int, *calls: tuple[str, dict[str, Any]]) -> ModelResponse:
    blocks = tuple(
        ToolUseBlock(id=f"toolu_{n:03d}_{i}_{name}", name=name, input=args)
        for i, (name, args) in enumerate(calls)
    )
    return ModelResponse(content=blocks, stop_reason="tool_use")


def _say(text: str) -> ModelResponse:
    return ModelResponse(content=(TextBlock(text),), stop_reason="end_turn")
