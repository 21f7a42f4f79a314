"""The inbox's HTML: Jinja2 templates (``templates/``, auto-escaped) and its two static files.

Every value reaches the page through a template with ``autoescape=True`` and ``StrictUndefined``;
nothing is marked safe. The page holds no inline script or style: its stylesheet and script are
files of this package served by ``GET /inbox/static/{asset}`` (:func:`asset`), which
:data:`HEADERS`' Content-Security-Policy allows (``'self'``) and nothing else: no inline code, no
other origin, no frames, no plugins, forms only to this origin.

Jinja2 is imported when the first page is rendered, not when the api starts.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from loopengine.channels.inbox.cards import Card, Flash, Group
from loopengine.channels.magic import pages as magic_pages

if TYPE_CHECKING:
    import jinja2

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


@functools.cache
def _environment() -> jinja2.Environment:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("loopengine.channels.inbox", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def asset(name: str) -> tuple[str, str] | None:
    """(content type, text) of a static file by name; None for any name not in :data:`ASSETS`."""
    content_type = ASSETS.get(name)
    if content_type is None:
        return None
    return content_type, _read(name)


@functools.cache
def _read(name: str) -> str:
    return resources.files("loopengine.channels.inbox").joinpath("static", name).read_text(encoding="utf-8")


@functools.cache
def asset_url(name: str) -> str:
    """The URL of a static file, versioned by its content so a changed file is fetched again."""
    found = asset(name)
    version = hashlib.sha256(found[1].encode()).hexdigest()[:12] if found else "0"
    return f"{STATIC_PATH}{name}?v={version}"


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
    return _environment().get_template(template).render(**shared, **values)


def inbox(page: Page) -> str:
    """The inbox: every open item the caller may see, grouped by tenant and agent."""
    title = f"Inbox ({page.count})" if page.count else "Inbox"
    follow = " ".join(f"{turn}:{after}" for turn, after in page.follow)
    list_url = "/pending-approvals" + page.filter.query()
    return _render("inbox.html", title=title, page=page, follow=follow, list_url=list_url)


def message(status_title: str, text: str, state: str, css: str = "error", back: str = PAGE_PATH) -> str:
    """A page that says one thing (a refusal, a failure), with a way back to the inbox."""
    return _render("message.html", title=status_title, text=text, state=state, css=css, back=back)
