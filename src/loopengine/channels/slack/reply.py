"""Answer a Slack interaction through its ``response_url``.

For ``block_actions`` Slack ignores the body of the HTTP answer to the click: the message only
changes when the app POSTs to the interaction's ``response_url`` (``replace_original`` to replace
the message and drop its buttons, ``response_type: ephemeral`` for a note only the clicker sees).
:func:`post_reply` does that POST.

A ``response_url`` is a bearer credential (anyone holding it may rewrite the message for a while),
so it is never put in an error message: failures name only ``scheme://host[:port]``. Only
``https://`` URLs are accepted, plus ``http://`` to a loopback host (``127.0.0.1``, ``localhost``,
``::1``) for local receivers in tests and development. Redirects are not followed.

The POST itself is :func:`loopengine.channels.http.post` (httpx imported on first send, a
short-lived client per send).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopengine.channels import http
from loopengine.domain.base.errors import DeliveryError

if TYPE_CHECKING:
    import httpx

USER_AGENT = "loopengine-slack/0.1"
SUBJECT = "Slack response_url"
_MAX_DETAIL = 80  # characters of Slack's answer body quoted in an error (e.g. "expired_url")


def _check_url(response_url: str) -> str:
    """The URL's loggable target; DeliveryError unless it is https, or http to a loopback host."""
    if not isinstance(response_url, str) or not response_url:
        raise DeliveryError(f"{SUBJECT} is empty")
    parts = http.split_url(response_url, SUBJECT, DeliveryError)
    if not parts.hostname:
        raise DeliveryError(f"{SUBJECT} must be an absolute https:// URL")
    if http.has_credentials(parts):
        raise DeliveryError(f"{SUBJECT} must not carry credentials")
    http.require_https(parts, SUBJECT, DeliveryError)
    # the path carries the credential: name only scheme://host[:port]
    return f"{SUBJECT} {http.origin(response_url)}"


def _scrub(text: str, response_url: str) -> str:
    """``text`` with the URL and its path (the credential) removed, however they got in."""
    return http.scrub(text, url=response_url, url_mark="[response_url]")


def post_reply(
    response_url: str,
    message: dict[str, Any],
    *,
    timeout: float = 3.0,
    transport: httpx.BaseTransport | None = None,
) -> None:
    """POST ``message`` as JSON to a Slack interaction's ``response_url``; any 2xx is success.

    ``transport`` replaces httpx's network transport (tests pass ``httpx.MockTransport``).
    Raises :class:`~loopengine.domain.base.errors.DeliveryError` for a URL that is not https (or http to a
    loopback host), a message that is not JSON, a timeout, a connection failure or a non-2xx
    answer; its message names the host, never the URL's path.
    """
    target = _check_url(response_url)
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    try:
        body = http.compact_json(message)
    except (TypeError, ValueError) as exc:
        raise DeliveryError(f"the Slack reply is not JSON-serialisable: {exc}") from None
    headers = {"Content-Type": http.JSON_UTF8, "User-Agent": USER_AGENT}
    response = http.post(
        response_url,
        body,
        headers,
        target=target,
        timeout=timeout,
        transport=transport,
        detail=lambda text: _scrub(text, response_url),
    )
    if not response.is_success:
        said = _scrub(response.text.strip()[:_MAX_DETAIL], response_url)
        said = f" ({said})" if said and said.isprintable() else ""
        raise DeliveryError(f"{target} answered {http.status(response)}{said}")
