"""The conversation page's HTML: Jinja2 templates (``templates/``, auto-escaped) and its static files.

As the inbox's pages (:mod:`loopengine.channels.inbox.render`): every value reaches the page through a
template with ``autoescape=True`` and ``StrictUndefined``, nothing is marked safe, and the page holds
no inline script or style. Its stylesheet, its one script (``chat.js``) and the client module that
script uses (``loopengine-client.js``, also for any other frontend) are files of this package served
by ``GET /chat/static/{asset}`` (:func:`asset`), which :data:`HEADERS`' Content-Security-Policy allows
(``'self'``) and nothing else. An argument's control is the inbox's own macro (``control`` of the
inbox's ``_macros.html``), fed the magic-link form's fields, and the page extends the inbox's
``base.html`` (both through :func:`loopengine.channels.html.environment`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from loopengine.channels import html
from loopengine.channels.chat.thread import Thread
from loopengine.channels.inbox import render as inbox_render

PAGE_PATH = "/chat/"
STATIC_PATH = "/chat/static/"
CLIENT = "loopengine-client.js"
HEADERS: Mapping[str, str] = dict(inbox_render.HEADERS)
"""The inbox's headers: no caching, no frames, no referrer elsewhere, a CSP that allows no inline code."""
ASSETS: Mapping[str, str] = {
    "chat.css": "text/css; charset=utf-8",
    "chat.js": "text/javascript; charset=utf-8",
    CLIENT: "text/javascript; charset=utf-8",
}
"""The static files ``GET /chat/static/{asset}`` serves, with their content types (nothing else)."""
VERSIONED_HEADERS: Mapping[str, str] = dict(inbox_render.ASSET_HEADERS)
"""A file asked for by its current content hash (``?v=``) may be kept."""
FRESH_HEADERS: Mapping[str, str] = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
"""Any other request for a file (the client module imported by name) is checked again each time."""
STOP_HINT = (
    "Stop ends the turn: nothing further runs. It cannot undo what already ran: a refund already "
    "issued or an email already sent stays done."
)


FILES = html.StaticFiles("loopengine.channels.chat", STATIC_PATH, ASSETS)
asset = FILES.asset
"""(content type, text) of a static file by name; None for any name not in :data:`ASSETS`."""
version = FILES.version
"""A static file's content hash (what its versioned URL carries)."""


def asset_headers(name: str, asked_version: str | None) -> Mapping[str, str]:
    """Cache headers for a file: kept when asked for by its current version, else checked each time."""
    return VERSIONED_HEADERS if asked_version == version(name) else FRESH_HEADERS


asset_url = FILES.url
"""The URL of a static file, versioned by its content."""


def page_url(agent: str, session_id: str | None = None, tenant: str | None = None) -> str:
    """The page's URL for ``agent`` (and a session, and a named tenant)."""
    query = {k: v for k, v in (("session", session_id), ("tenant", tenant)) if v is not None}
    return PAGE_PATH + quote(agent, safe="") + ("?" + urlencode(query) if query else "")


@dataclass(frozen=True, slots=True)
class Page:
    """Everything the conversation page shows."""

    who: str
    agent: str
    tenant: str | None
    tenant_label: str
    session_id: str | None
    thread: Thread

    @property
    def url(self) -> str:
        """The page again (what the script reads the thread back from)."""
        return page_url(self.agent, self.session_id, self.tenant)


def _render(template: str, **values: Any) -> str:
    shared = {"css_url": asset_url("chat.css"), "js_url": asset_url("chat.js"), "stop_hint": STOP_HINT}
    templates = html.environment("loopengine.channels.chat", "loopengine.channels.inbox")  # its control macro
    return templates.get_template(template).render(**shared, **values)


def chat(page: Page) -> str:
    """The conversation page: the thread so far, the composer, Stop."""
    return _render("chat.html", title=f"Chat with {page.agent}", page=page, thread=page.thread)


def message(title: str, text: str, state: str, back: str | None = None) -> str:
    """A page that says one thing (a refusal, a failure), with a way back to a new conversation."""
    return _render("chat_message.html", title=title, text=text, state=state, back=back)
