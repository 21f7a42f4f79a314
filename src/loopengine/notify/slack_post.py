"""The ``slack`` channel: post each notification to a Slack channel with ``chat.postMessage``.

    notifier:
      channel: slack
      config:
        channel: C0123456789        # a channel id (or a name the bot may post to), required
        token_env: SLACK_BOT_TOKEN  # the bot token (xoxb-...), only ever from the environment
        api_base_env: ...           # optional; api_base or api_base_env, default https://slack.com/api

What is posted, per event (``text`` is always there: Slack shows it in notifications and where
blocks cannot be shown):

* ``approval``: :func:`loopengine.slack.approval_blocks`, the message whose Approve and Deny
  buttons ``POST /integrations/slack/interactions`` reads back (``approve:<pendingId>``), so the
  Slack app's Interactivity Request URL must point at that route;
* ``question``: :func:`loopengine.slack.question_blocks`: the question and its options, and where
  to answer (the app, or the resolve route). A free-text answer cannot come back through a button;
* ``run_start`` / ``run_finish``: one short line (the finish carries the final text, clipped).

The request is ``POST {api_base}/chat.postMessage`` with a JSON body and
``Authorization: Bearer <token>``. Slack answers HTTP 200 with ``{"ok": false, "error": "<code>"}``
when it refuses (``channel_not_found``, ``not_in_channel``, ``invalid_auth``, ...): that is a
:class:`~loopengine.errors.DeliveryError` naming the code, as is any other status, a timeout or a
refused connection. Error messages never contain the token. ``api_base`` must be https (http only
to a loopback host, for local tests), since the token travels with every request. Redirects are not
followed.

httpx is imported on first send, like :mod:`loopengine.notify.webhook`; each send uses its own
short-lived client, so nothing stays open between sends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from loopengine import slack
from loopengine.clock import Clock
from loopengine.errors import ConfigError, DeliveryError
from loopengine.ports import Notification

if TYPE_CHECKING:
    import httpx

USER_AGENT = "loopengine-slack/0.1"
DEFAULT_API_BASE = "https://slack.com/api"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
TEXT_LIMIT = 3000
"""Characters of fallback ``text`` (Slack accepts far more; a notification needs far less)."""
_MAX_DETAIL = 80


def _display(url: str) -> str:
    """``scheme://host[:port]/path`` of the API base: what error messages show."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"


def _check_api_base(api_base: str) -> str:
    """The API base without a trailing slash; ConfigError unless https (or http to loopback)."""
    try:
        parts = urlsplit(api_base)
        _ = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError:
        raise ConfigError("notifier slack: api_base is not a valid URL") from None
    host = (parts.hostname or "").lower()
    if not host or parts.username is not None or parts.password is not None:
        raise ConfigError("notifier slack: api_base must be an absolute https:// URL without credentials")
    if parts.query or parts.fragment:
        raise ConfigError("notifier slack: api_base must not have a query or fragment")
    if parts.scheme == "https" or (parts.scheme == "http" and host in LOOPBACK_HOSTS):
        return api_base.rstrip("/")
    raise ConfigError("notifier slack: api_base must be https:// (http:// only to 127.0.0.1 or localhost)")


def _text(value: Any) -> str:
    """A payload field as text ('' for missing)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _clip(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_text(event: str, payload: Mapping[str, Any]) -> str:
    """The one line (mrkdwn, escaped) posted for ``run_start`` and ``run_finish``."""
    agent = slack.escape(_text(payload.get("agent")) or "?")
    turn = slack.escape(_text(payload.get("turnId")))
    if event == "run_start":
        trigger = slack.escape(_text(payload.get("trigger")) or "message")
        return f"Run started: `{agent}` ({trigger}), turn `{turn}`"
    stop = slack.escape(_text(payload.get("stopReason")) or "finished")
    line = f"Run finished: `{agent}` ({stop}), turn `{turn}`"
    final = _text(payload.get("text")).strip()
    if final:
        line += "\n" + "\n".join(f"> {row}" for row in slack.escape(final).splitlines())
    return _clip(line)


def message(event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """``{"text": ..., "blocks": [...]}`` for one notification (no ``channel``).

    Raises ValueError for an unknown event or a payload without what the event needs.
    """
    if event == "approval":
        pending_id = _text(payload.get("pendingId"))
        tool = _text(payload.get("tool"))
        args = payload.get("args")
        if not isinstance(args, dict):
            raise ValueError("an approval notification needs args (an object)")
        blocks = slack.approval_blocks(pending_id, tool, args, _text(payload.get("reason")))
        return {"text": _clip(f"Approval needed: {slack.escape(tool)}"), "blocks": blocks}
    if event == "question":
        pending_id = _text(payload.get("pendingId"))
        if not pending_id:
            raise ValueError("a question notification needs a pendingId")
        question = _text(payload.get("question"))
        raw = payload.get("options")
        options = [_text(o) for o in raw] if isinstance(raw, list) else None
        resolve_url = _text(payload.get("resolveUrl")) or None
        blocks = slack.question_blocks(pending_id, question, options, resolve_url)
        return {"text": _clip(f"Question: {slack.escape(question)}"), "blocks": blocks}
    if event in ("run_start", "run_finish"):
        return {"text": run_text(event, payload)}
    raise ValueError(f"unknown notification event {event!r}")


class SlackNotifier:
    """Posts notifications to one Slack channel as the bot (a ``Notifier``)."""

    def __init__(
        self,
        channel: str,
        token: str,
        *,
        api_base: str = DEFAULT_API_BASE,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """Post to ``channel`` with the bot ``token`` through ``api_base``.

        ``transport`` replaces httpx's network transport (tests may pass ``httpx.MockTransport``).
        Raises :class:`~loopengine.errors.ConfigError` for an empty channel or token, an
        ``api_base`` that is not https (or http to a loopback host), or a non-positive timeout.
        """
        channel = channel.strip()
        if not channel:
            raise ConfigError("notifier slack: channel must not be empty")
        if not token:
            raise ConfigError("notifier slack: the bot token must not be empty")
        if timeout <= 0:
            raise ConfigError("notifier slack: timeout must be positive")
        self._channel = channel
        self._token = token
        self._url = _check_api_base(api_base) + "/chat.postMessage"
        self._timeout = timeout
        self._transport = transport
        self._where = f"slack #{channel.lstrip('#')}"

    @property
    def destination(self) -> str:
        """Where this notifier posts (``"slack #<channel>"``), safe to log."""
        return self._where

    def __repr__(self) -> str:
        """Show the channel, never the token."""
        return f"SlackNotifier({self._where!r})"

    def _fail(self, text: str) -> DeliveryError:
        """A DeliveryError whose message is scrubbed of the token, however it got there."""
        return DeliveryError(text.replace(self._token, "[redacted]"))

    def send(self, notification: Notification) -> str:
        """Post the notification; return ``"slack #<channel>"`` once Slack says ``ok``.

        Raises :class:`~loopengine.errors.DeliveryError` for an unknown event or unusable payload,
        a non-2xx answer, ``{"ok": false}`` (naming Slack's error code), a timeout or a
        connection failure.
        """
        try:
            body = {"channel": self._channel, **message(notification.event, notification.payload)}
            content = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise self._fail(f"{self._where}: cannot post this {notification.event}: {exc}") from None
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "Authorization": f"Bearer {self._token}",
            "User-Agent": USER_AGENT,
        }

        import httpx  # deferred: keep `import loopengine.notify.slack_post` cheap

        target = f"{self._where}: chat.postMessage at {_display(self._url)}"
        try:
            with httpx.Client(
                timeout=self._timeout, transport=self._transport, follow_redirects=False
            ) as client:
                response = client.post(self._url, content=content.encode("utf-8"), headers=headers)
        except httpx.TimeoutException as exc:
            # `from None`: the httpx exception carries the request, and with it the headers
            raise self._fail(f"{target} timed out after {self._timeout:g} s ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise self._fail(f"{target} failed: {type(exc).__name__}: {exc}") from None
        if not response.is_success:
            phrase = f" {response.reason_phrase}" if response.reason_phrase else ""
            retry = response.headers.get("Retry-After", "")
            later = f" (retry after {retry} s)" if retry.isdigit() else ""
            raise self._fail(f"{target} answered {response.status_code}{phrase}{later}")
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
            raise self._fail(f"{target} answered {response.status_code} without Slack's JSON")
        if not answer["ok"]:
            code = answer.get("error")
            code = code[:_MAX_DETAIL] if isinstance(code, str) and code.isprintable() else "unknown_error"
            raise self._fail(f"{target} refused the message: {code}")
        return self._where


def from_config(config: dict[str, Any], env: Mapping[str, str], clock: Clock) -> SlackNotifier:
    """An agent's Slack channel: ``{channel | channel_env, token_env, api_base | api_base_env}``.

    The bot token only ever comes from the environment (``token_env``); an inline ``token`` is a
    :class:`~loopengine.errors.ConfigError`. ``clock`` is unused (Slack needs no timestamps).
    """
    from loopengine.notify.channels import secret, setting

    channel = setting(config, env, "channel")
    if not channel:
        raise ConfigError("notifier slack: needs channel (a channel id such as C0123456789) or channel_env")
    token = secret(config, env, "token", "slack")
    api_base = setting(config, env, "api_base") or DEFAULT_API_BASE
    return SlackNotifier(channel, token, api_base=api_base)
