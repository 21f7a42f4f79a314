"""The product's routes, from where they are declared: DESIGN.md's route table and template.yaml.

``DESIGN_ROUTES`` is DESIGN.md's table as the template declares it today, with the routes the inbox
page needs beside it (``INBOX_ROUTES``) and the conversation page's (``CHAT_ROUTES``, which DESIGN.md
names in its section "Where the yes happens"); template, SAM local and event tests use it.
``tests/test_docs.py`` checks it against DESIGN.md itself, so the copy cannot drift. DESIGN.md lives
outside the repository (``../shared/DESIGN.md`` beside it in CI, read-only); :func:`design_md_routes`
is ``None`` where it is absent, and the tests that need it skip, saying so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
DESIGN_MD = ROOT.parent / "shared" / "DESIGN.md"
NO_DESIGN_MD = f"DESIGN.md is not at {DESIGN_MD} (it sits beside the repository as shared/DESIGN.md)"

INBOX_ROUTES = frozenset({"POST /inbox/items/{pendingId}", "GET /inbox/static/{asset}"})
"""What DESIGN.md's ``GET /inbox`` page needs beside it (its form's post, its CSS and JS files): the
template declares them with the page, DESIGN.md's table names only the page."""
BILL_ROUTES = frozenset({"GET /usage"})
"""Routes DESIGN.md names in "The model bill and long sessions" rather than in its route table."""
CHAT_ROUTES = frozenset({"GET /chat/{agent}", "GET /chat/static/{asset}"})
"""The conversation page and its files: DESIGN.md names them in "Where the yes happens" (not in the
HTTP API's table), and the template declares them like the others."""
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
        "GET /inbox",
        *INBOX_ROUTES,
        *BILL_ROUTES,
        *CHAT_ROUTES,
    }
)
NOT_IN_TEMPLATE_YET: frozenset[str] = frozenset()
"""Routes DESIGN.md names that the template does not declare yet (remove one when it lands)."""
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

ROUTE = re.compile(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`\s]*)`")
PARAM = re.compile(r"<(\w+)>")


def design_md_routes(path: Path = DESIGN_MD) -> frozenset[str] | None:
    """Every ``METHOD /path`` in the first column of DESIGN.md's "HTTP API" table; None if absent."""
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    section = text.split("\n## HTTP API", 1)[1].split("\n## ", 1)[0]
    return table_routes(section)


def table_routes(markdown: str) -> frozenset[str]:
    """The routes named in the first cell of each row of the markdown tables in ``markdown``."""
    found: set[str] = set()
    for line in markdown.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            first = line.split("|")[1]
            found.update(f"{method} {path}" for method, path in ROUTE.findall(first))
    return frozenset(found)


def template_routes(path: Path = TEMPLATE) -> frozenset[str]:
    """The routes of the HttpApi's OpenAPI ``DefinitionBody`` in template.yaml (CFN tags parsed)."""
    from samtranslator.yaml_helper import yaml_parse

    template: dict[str, Any] = yaml_parse(path.read_text(encoding="utf-8"))
    body = template["Resources"]["HttpApi"]["Properties"]["DefinitionBody"]
    return frozenset(f"{method.upper()} {route}" for route, item in body["paths"].items() for method in item)


def served_routes(app: Any, in_schema_only: bool = False) -> frozenset[str]:
    """The routes a Powertools resolver registered, as ``METHOD /path`` with ``{name}`` parameters.

    ``in_schema_only``: only those its OpenAPI document includes.
    """
    routes = [
        r for r in (*app._static_routes, *app._dynamic_routes) if r.include_in_schema or not in_schema_only
    ]
    return frozenset(r.method + " " + PARAM.sub(r"{\1}", r.path) for r in routes)
