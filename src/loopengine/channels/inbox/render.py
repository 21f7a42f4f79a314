"""The inbox's HTML: Jinja2 templates (``templates/``, auto-escaped) and its two static files.

Every value reaches the page through a template of :func:`loopengine.channels.html.environment`
(``autoescape=True`` and ``StrictUndefined``); nothing is marked safe. The page holds no inline
script or style: its stylesheet and script are files of this package served by
``GET /inbox/static/{asset}`` (:func:`asset`), which
:data:`HEADERS`' Content-Security-Policy allows (``'self'``) and nothing else: no inline code, no
other origin, no frames, no plugins, forms only to this origin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from loopengine.channels import html
from loopengine.channels.inbox.cards import Card, Flash, Group
from loopengine.channels.magic import pages as magic_pages

PAGE_PATH = "/inbox"
STATIC_PATH = "/inbox/static/"
ITEM_PATH = "/inbox/items/"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'none'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS: Mapping[str, str] = {
    **magic_pages.HEADERS,
    "Content-Security-Policy": CSP,
    # not no-referrer: under it a browser sends "Origin: null" with a same-origin form post, and the
    # origin check (csrf.cross_site) needs the real one; same-origin still sends nothing elsewhere
    "Referrer-Policy": "same-origin",
}
"""Headers of every inbox page: the magic-link pages' own, with a CSP that allows no inline code."""
ASSETS: Mapping[str, str] = {
    "inbox.css": "text/css; charset=utf-8",
    "inbox.js": "text/javascript; charset=utf-8",
}
"""The static files ``GET /inbox/static/{asset}`` serves, with their content types (nothing else)."""
ASSET_HEADERS: Mapping[str, str] = {
    "Cache-Control": "private, max-age=86400, immutable",
    "X-Content-Type-Options": "nosniff",
}
"""The files are addressed by a hash of their content (``?v=``), so a browser may keep them."""


FILES = html.StaticFiles("loopengine.channels.inbox", STATIC_PATH, ASSETS)
asset = FILES.asset
"""(content type, text) of a static file by name; None for any name not in :data:`ASSETS`."""
asset_url = FILES.url
"""The URL of a static file, versioned by its content so a changed file is fetched again."""


@dataclass(frozen=True)
class Filter:
    """The page's filter, kept across a decision: one tenant and/or one agent."""

    tenant: str | None = None
    agent: str | None = None

    def query(self, **extra: str) -> str:
        """The filter (and ``extra``) as a query string, ``?...`` or empty."""
        pairs = {"tenant": self.tenant, "agent": self.agent, **extra}
        given = {k: v for k, v in pairs.items() if v is not None}
        return "?" + urlencode(given) if given else ""


@dataclass(frozen=True)
class Page:
    """Everything the inbox page shows."""

    who: str
    tenants: str
    filter: Filter
    groups: Sequence[Group]
    listed: Sequence[str]
    follow: Sequence[tuple[str, int]]
    can_decide: bool
    flash: Flash | None = None
    problem: Card | None = None
    more: int = 0

    @property
    def count(self) -> int:
        return sum(len(g.cards) for g in self.groups)

    @property
    def refresh_url(self) -> str:
        """The URL that shows the page again: same filter and flash (its item's fate read afresh)."""
        extra = {"item": self.flash.pending_id} if self.flash is not None else {}
        return PAGE_PATH + self.filter.query(**extra)


def _render(template: str, **values: Any) -> str:
    shared = {
        "css_url": asset_url("inbox.css"),
        "js_url": asset_url("inbox.js"),
        "page_path": PAGE_PATH,
        "item_path": ITEM_PATH,
    }
    return html.environment("loopengine.channels.inbox").get_template(template).render(**shared, **values)


def inbox(page: Page) -> str:
    """The inbox: every open item the caller may see, grouped by tenant and agent."""
    title = f"Inbox ({page.count})" if page.count else "Inbox"
    follow = " ".join(f"{turn}:{after}" for turn, after in page.follow)
    list_url = "/pending-approvals" + page.filter.query()
    return _render("inbox.html", title=title, page=page, follow=follow, list_url=list_url)


def message(status_title: str, text: str, state: str, css: str = "error", back: str = PAGE_PATH) -> str:
    """A page that says one thing (a refusal, a failure), with a way back to the inbox."""
    return _render("message.html", title=status_title, text=text, state=state, css=css, back=back)
