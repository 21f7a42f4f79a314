"""DESIGN.md "HTTP API": the product's route table, verbatim (template, SAM local and event tests)."""

from __future__ import annotations

DESIGN_ROUTES = frozenset(
    {
        "POST /agents/{agent}/messages",
        "POST /pending-approvals/{pendingId}/resolve",
        "POST /pending-questions/{pendingId}/answer",
        "GET /pending-approvals",
        "GET /turns/{turnId}",
        "POST /turns/{turnId}/cancel",
        "GET /turns/{turnId}/events",
        "GET /sessions/{sessionId}",
        "GET /magic/{token}",
        "POST /magic/{token}",
        "POST /integrations/slack/interactions",
        "POST /integrations/lark/interactions",
        "GET /openapi.json",
        "GET /docs",
        "GET /health",
    }
)
PUBLIC_ROUTES = frozenset(
    {
        "GET /health",
        "GET /magic/{token}",
        "POST /magic/{token}",
        "POST /integrations/slack/interactions",
        "POST /integrations/lark/interactions",
    }
)
"""Authenticated by their own means (or not at all); never behind the JWT authorizer."""
