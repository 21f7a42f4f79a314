"""Open a Slack modal: ``views.open`` with the click's ``trigger_id`` and the bot token.

The request is ``POST {api_base}/views.open`` with the JSON body ``{"trigger_id", "view"}`` and
``Authorization: Bearer <bot token>`` (Slack's Web API, as ``chat.postMessage`` in
:mod:`loopengine.channels.slack.send`). Slack answers HTTP 200 with ``{"ok": true, "view": ...}``,
or ``{"ok": false, "error": "<code>"}`` (``expired_trigger_id``: the trigger is good for 3 s;
``invalid_auth``, ...), which is a :class:`~loopengine.domain.base.errors.DeliveryError` naming the
code, as is any other status, a timeout or a refused connection. Messages never contain the
token. ``api_base`` must be https (http only to a loopback host, for local tests); redirects are
not followed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopengine.channels import http
from loopengine.channels.slack.send import USER_AGENT, check_api_base, display
from loopengine.domain.base.errors import ConfigError, DeliveryError

if TYPE_CHECKING:
    import httpx

_MAX_DETAIL = 80


def open_view(
    api_base: str,
    token: str,
    trigger_id: str,
    view: dict[str, Any],
    *,
    timeout: float = 2.0,
    transport: httpx.BaseTransport | None = None,
) -> None:
    """Open ``view`` for the user whose click carried ``trigger_id``; DeliveryError when Slack will not.

    ConfigError for an empty token or an ``api_base`` that is not https (or http to loopback).
    """
    if not token:
        raise ConfigError("Slack views.open: the bot token must not be empty")
    url = check_api_base(api_base) + "/views.open"
    target = f"Slack views.open at {display(url)}"

    def fail(text: str) -> DeliveryError:
        return DeliveryError(http.scrub(text, token))

    try:
        content = http.compact_json({"trigger_id": trigger_id, "view": view})
    except (TypeError, ValueError) as exc:
        raise fail(f"{target}: the view is not JSON: {exc}") from None
    headers = {"Content-Type": http.JSON_UTF8, "Authorization": f"Bearer {token}", "User-Agent": USER_AGENT}
    response = http.post(
        url, content, headers, target=target, timeout=timeout, transport=transport, fail=fail
    )
    if not response.is_success:
        raise fail(f"{target} answered {http.status(response)}")
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        raise fail(f"{target} answered {response.status_code} without Slack's JSON")
    if not answer["ok"]:
        code = answer.get("error")
        code = code[:_MAX_DETAIL] if isinstance(code, str) and code.isprintable() else "unknown_error"
        raise fail(f"{target} refused the view: {code}")
