"""The inbox's defences against cross-site requests: a per-principal, per-item token and the origin check.

A browser sends its saved Basic credentials with every request to the API's origin, whoever made the
page that sends it, so a form post to ``POST /inbox/items/{pendingId}`` proves nothing by its
credentials alone. Two checks stand in front of every decision:

- :func:`issue` / :func:`valid`: a token in a hidden field, HMAC-SHA256 over (principal kind, typed
  identity, pendingId) under a server key. Only a page the server rendered for that principal holds
  it; it is useless for any other item or any other caller. Compared in constant time.
- :func:`cross_site`: ``Sec-Fetch-Site`` (when the browser sends it) must be ``same-origin``, and
  ``Origin`` (when sent) must be the API's own origin (the ``Host`` the request came to, or the
  deployment's public URL); ``Origin: null`` is refused.

The key (:func:`key_from`) is derived from ``LOOPENGINE_INBOX_SECRET``, else from
``LOOPENGINE_MAGIC_LINK_SECRET``, each under its own label, so no magic-link token or webhook
signature can ever be an inbox token. Without either, the inbox lists but cannot decide.

Standard library only (plus loopengine's principal).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import urlsplit

from loopengine.channels.magic.token import SECRET_ENV as MAGIC_SECRET_ENV
from loopengine.domain.principals import Principal

SECRET_ENV = "LOOPENGINE_INBOX_SECRET"
"""The inbox's own key; without it the magic-link key is used (under another label)."""
KEY_SOURCES = (SECRET_ENV, MAGIC_SECRET_ENV)
LABEL = b"loopengine inbox form token v1\x00"
FIELD = "csrf"
"""The hidden form field that carries the token."""
DEFAULT_PORTS = {"http": "80", "https": "443"}


def key_from(env: Mapping[str, str]) -> bytes | None:
    """The token key from the first secret of :data:`KEY_SOURCES` that is set; None when none is."""
    for name in KEY_SOURCES:
        secret = env.get(name) or ""
        if secret:
            return hmac.new(secret.encode("utf-8"), LABEL + name.encode(), hashlib.sha256).digest()
    return None


def issue(key: bytes, who: Principal, pending_id: str) -> str:
    """The token that lets ``who`` post a decision on ``pending_id`` (URL-safe base64, no padding)."""
    message = "\x00".join((who.kind, who.id, pending_id)).encode("utf-8")
    mac = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def valid(key: bytes, who: Principal, pending_id: str, given: str) -> bool:
    """Whether ``given`` is ``who``'s token for ``pending_id`` (constant time)."""
    return hmac.compare_digest(issue(key, who, pending_id).encode("ascii"), given.encode("utf-8"))


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of ``url``, lower case, without a default port; None if it has none."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if scheme not in DEFAULT_PORTS or not host:
        return None
    host = f"[{host}]" if ":" in host else host
    shown = "" if port is None or str(port) == DEFAULT_PORTS[scheme] else f":{port}"
    return f"{scheme}://{host.lower()}{shown}"


def own_origins(headers: Mapping[str, str], public_url: str = "") -> set[str]:
    """The origins a same-site form post comes from: the ``Host`` it was sent to, and the public URL."""
    found = set()
    host = headers.get("host") or ""
    scheme = (headers.get("x-forwarded-proto") or "http").split(",")[0].strip().lower()
    if host:
        mine = origin_of(f"{scheme}://{host}")
        if mine is not None:
            found.add(mine)
    public = origin_of(public_url) if public_url else None
    if public is not None:
        found.add(public)
    return found


def cross_site(headers: Mapping[str, str], public_url: str = "") -> str | None:
    """Why this request looks cross-site (for the refusal page), or None when it does not.

    ``headers`` are the request's, with lower-case names (as API Gateway's payload 2.0 has them). A
    client that sends neither header (curl, a script) is not a browser being tricked: the token
    alone guards it.
    """
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() != "same-origin":
        return f"the browser says this request came from another site (Sec-Fetch-Site: {site[:40]})"
    origin = headers.get("origin")
    if origin is None:
        return None
    found = origin_of(origin) if origin.strip().lower() != "null" else None
    if found is None or found not in own_origins(headers, public_url):
        return "this form was not sent from this inbox's own pages (its Origin is another site's)"
    return None
