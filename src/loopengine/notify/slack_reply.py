"""Answer a Slack interaction through its ``response_url``.

For ``block_actions`` Slack ignores the body of the HTTP answer to the click: the message only
changes when the app POSTs to the interaction's ``response_url`` (``replace_original`` to replace
the message and drop its buttons, ``response_type: ephemeral`` for a note only the clicker sees).
:func:`post_reply` does that POST.

A ``response_url`` is a bearer credential (anyone holding it may rewrite the message for a while),
so it is never put in an error message: failures name only ``scheme://host[:port]``. Only
``https://`` URLs are accepted, plus ``http://`` to a loopback host (``127.0.0.1``, ``localhost``,
``::1``) for local receivers in tests and development. Redirects are not followed.

httpx is imported on first send, like :mod:`loopengine.notify.webhook`, so importing this module
stays cheap. Each send uses its own short-lived client.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from loopengine.errors import DeliveryError

if TYPE_CHECKING:
    import httpx

USER_AGENT = "loopengine-slack/0.1"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_MAX_DETAIL = 80  # characters of Slack's answer body quoted in an error (e.g. "expired_url")


def _target(response_url: str) -> str:
    """``scheme://host[:port]`` of a checked URL: safe to log (the path carries the credential)."""
    parts = urlsplit(response_url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"Slack response_url {parts.scheme}://{host}{port}"


def _check_url(response_url: str) -> str:
    """The URL's loggable target; DeliveryError unless it is https, or http to a loopback host."""
    if not isinstance(response_url, str) or not response_url:
        raise DeliveryError("Slack response_url is empty")
    try:
        parts = urlsplit(response_url)
        _ = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError:
        raise DeliveryError("Slack response_url is not a valid URL") from None
    host = (parts.hostname or "").lower()
    if not host:
        raise DeliveryError("Slack response_url must be an absolute https:// URL")
    if parts.username is not None or parts.password is not None:
        raise DeliveryError("Slack response_url must not carry credentials")
    if parts.scheme == "https" or (parts.scheme == "http" and host in LOOPBACK_HOSTS):
        return _target(response_url)
    raise DeliveryError("Slack response_url must be https:// (http:// only to 127.0.0.1 or localhost)")


def _scrub(text: str, response_url: str) -> str:
    """``text`` with the URL and its path (the credential) removed, however they got in."""
    path = urlsplit(response_url).path
    text = text.replace(response_url, "[response_url]")
    if len(path) > 1:
        text = text.replace(path, "/[redacted]")
    return text


def post_reply(
    response_url: str,
    message: dict[str, Any],
    *,
    timeout: float = 3.0,
    transport: httpx.BaseTransport | None = None,
) -> None:
    """POST ``message`` as JSON to a Slack interaction's ``response_url``; any 2xx is success.

    ``transport`` replaces httpx's network transport (tests pass ``httpx.MockTransport``).
    Raises :class:`~loopengine.errors.DeliveryError` for a URL that is not https (or http to a
    loopback host), a message that is not JSON, a timeout, a connection failure or a non-2xx
    answer; its message names the host, never the URL's path.
    """
    target = _check_url(response_url)
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    try:
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise DeliveryError(f"the Slack reply is not JSON-serialisable: {exc}") from None
    headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": USER_AGENT}

    import httpx  # deferred: keep `import loopengine.notify.slack_reply` cheap

    try:
        with httpx.Client(timeout=timeout, transport=transport, follow_redirects=False) as client:
            response = client.post(response_url, content=body.encode("utf-8"), headers=headers)
    except httpx.TimeoutException as exc:
        # `from None`: the httpx exception carries the request, and with it the URL
        raise DeliveryError(f"{target} timed out after {timeout:g} s ({type(exc).__name__})") from None
    except httpx.HTTPError as exc:
        detail = _scrub(str(exc), response_url)
        raise DeliveryError(f"{target} failed: {type(exc).__name__}: {detail}") from None
    if not response.is_success:
        phrase = f" {response.reason_phrase}" if response.reason_phrase else ""
        said = _scrub(response.text.strip()[:_MAX_DETAIL], response_url)
        said = f" ({said})" if said and said.isprintable() else ""
        raise DeliveryError(f"{target} answered {response.status_code}{phrase}{said}")
