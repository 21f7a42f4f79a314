"""customer-service's lookup_order and issue_refund, each counting its runs in bench.effects.RUNS."""

from __future__ import annotations

from typing import Any

from bench.effects import RUNS

from agents.customer_service.tools import IssueRefund, LookupOrder, issue_refund, lookup_order
from loopengine import Tool, tool_from_model


def counted_lookup(args: LookupOrder) -> dict[str, Any]:
    """Look the order up (counted)."""
    RUNS["lookup_order"] += 1
    return lookup_order(args)


def counted_refund(args: IssueRefund) -> dict[str, Any]:
    """Issue the refund (counted)."""
    RUNS["issue_refund"] += 1
    return issue_refund(args)


TOOLS: list[Tool] = [
    tool_from_model("lookup_order", "Look up an order by id.", LookupOrder, counted_lookup),
    tool_from_model(
        "issue_refund", "Refund (part of) an order to the customer.", IssueRefund, counted_refund
    ),
]
