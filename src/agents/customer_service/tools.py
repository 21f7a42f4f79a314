"""customer-service tools: look up an order, issue a refund, send an email.

The order data is a bundled fixture (``orders.json``); refunds and emails are recorded in-process
(``ISSUED_REFUNDS`` / ``SENT_EMAILS``) so the demo and tests can see exactly what ran, and how often.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from loopengine import Tool, new_id, tool_from_model

ISSUED_REFUNDS: list[dict[str, Any]] = []
SENT_EMAILS: list[dict[str, Any]] = []


@cache
def _orders() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(__file__).parent / "orders.json").read_text())
    return data


class LookupOrder(BaseModel):
    """Arguments of lookup_order."""

    order_id: str = Field(description="The order id, e.g. A-1001.")


class IssueRefund(BaseModel):
    """Arguments of issue_refund."""

    order_id: str = Field(description="The order to refund.")
    amount: float = Field(description="Amount in the order's currency.")
    reason: str = Field(description="Why the refund is issued.")


class SendEmail(BaseModel):
    """Arguments of send_email."""

    to: str = Field(description="Recipient address.")
    subject: str | None = Field(default=None, description="Subject line.")
    body: str = Field(description="The email text the customer reads.")
    intent: Literal["tracking_info", "refund", "other"] = Field(
        description=(
            "Why this email is being sent, so a human reviewer knows whether to check it before it sends."
        )
    )


def lookup_order(args: LookupOrder) -> dict[str, Any]:
    """Return the order, or an error object when there is no such order."""
    order = _orders().get(args.order_id)
    if order is None:
        return {"error": f"no order {args.order_id}"}
    return dict(order)


def issue_refund(args: IssueRefund) -> dict[str, Any]:
    """Issue the refund (recorded in ISSUED_REFUNDS)."""
    refund = {
        "refund_id": new_id("rf_")[:15],
        "order_id": args.order_id,
        "amount": args.amount,
        "status": "issued",
    }
    ISSUED_REFUNDS.append({**refund, "reason": args.reason})
    return refund


def send_email(args: SendEmail) -> dict[str, Any]:
    """Send the email (recorded in SENT_EMAILS)."""
    message_id = new_id("em_")[:15]
    SENT_EMAILS.append({"message_id": message_id, **args.model_dump()})
    return {"message_id": message_id, "to": args.to, "status": "sent"}


TOOLS: list[Tool] = [
    tool_from_model("lookup_order", "Look up an order by id.", LookupOrder, lookup_order),
    tool_from_model("issue_refund", "Refund (part of) an order to the customer.", IssueRefund, issue_refund),
    tool_from_model("send_email", "Email the customer.", SendEmail, send_email),
]
