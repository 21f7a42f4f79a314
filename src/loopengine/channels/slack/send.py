"""The ``slack`` channel: post each notification to a Slack channel with ``chat.postMessage``.

    notifier:
      channel: slack
      config:
        channel: C0123456789        # a channel id (or a name the bot may post to), required
        token_env: SLACK_BOT_TOKEN  # the bot token (xoxb-...), only ever from the environment
        api_base_env: ...           # optional; api_base or api_base_env, default https://slack.com/api

What is posted, per event (``text`` is always there: Slack shows it in notifications and where
blocks cannot be shown):

* ``approval``: :func:`loopengine.channels.slack.blocks.approval_blocks`, the message whose Approve
  and Deny buttons ``POST /integrations/slack/interactions`` reads back (``approve:<pendingId>``),
  so the Slack app's Interactivity Request URL must point at that route;
* ``question``: :func:`.blocks.question_blocks`: the question, a button per option (the route
  answers with that option's text as the pending item holds it) and "Type an answer", which opens
  a modal (``views.open``, :mod:`loopengine.channels.slack.views`; the route needs the bot token
  as ``LOOPENGINE_SLACK_BOT_TOKEN`` for it);
* ``run_start`` / ``run_finish``: one short line (the finish carries the final text, clipped).

The request is ``POST {api_base}/chat.postMessage`` with a JSON body and
``Authorization: Bearer <token>``. Slack answers HTTP 200 with ``{"ok": false, "error": "<code>"}``
when it refuses (``channel_not_found``, ``not_in_channel``, ``invalid_auth``, ...): that is a
:class:`~loopengine.domain.base.errors.DeliveryError` naming the code, as is any other status, a timeout or a
refused connection. Error messages never contain the token. ``api_base`` must be https (http only
to a loopback host, for local tests), since the token travels with every request. Redirects are not
followed.

The POST itself is :func:`loopengine.channels.http.post`: httpx imported on first send, a short-lived
client per send, so nothing stays open between sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from loopengine.app.ports import Notification
from loopengine.channels import http
from loopengine.channels.base import clip, secret, setting, text_of
from loopengine.channels.slack import blocks as slack
from loopengine.domain.base.clock import Clock
from loopengine.domain.base.errors import ConfigError, DeliveryError

if TYPE_CHECKING:
    import httpx

USER_AGENT = "loopengine-slack/0.1"
DEFAULT_API_BASE = "https://slack.com/api"
TEXT_LIMIT = 3000
"""Characters of fallback ``text`` (Slack accepts far more; a notification needs far less)."""
_MAX_DETAIL = 80


def display(url: str) -> str:
    """``scheme://host[:port]/path`` of the API base: what error messages show."""
    return f"{http.origin(url)}{urlsplit(url).path.rstrip('/')}"


def check_api_base(api_base: str) -> str:
    """The API base without a trailing slash; ConfigError unless https (or http to loopback)."""
    subject = "notifier slack: api_base"
    parts = http.split_url(api_base, subject, ConfigError)
    if not parts.hostname or http.has_credentials(parts):
        raise ConfigError(f"{subject} must be an absolute https:// URL without credentials")
    if parts.query or parts.fragment:
        raise ConfigError(f"{subject} must not have a query or fragment")
    http.require_https(parts, subject, ConfigError)
    return api_base.rstrip("/")


def runtext_of(event: str, payload: Mapping[str, Any]) -> str:
    """The one line (mrkdwn, escaped) posted for ``run_start`` and ``run_finish``."""
    agent = slack.escape(text_of(payload.get("agent")) or "?")
    turn = slack.escape(text_of(payload.get("turnId")))
    if event == "run_start":
        trigger = slack.escape(text_of(payload.get("trigger")) or "message")
        return f"Run started: `{agent}` ({trigger}), turn `{turn}`"
    stop = slack.escape(text_of(payload.get("stopReason")) or "finished")
    line = f"Run finished: `{agent}` ({stop}), turn `{turn}`"
    final = text_of(payload.get("text")).strip()
    if final:
        line += "\n" + "\n".join(f"> {row}" for row in slack.escape(final).splitlines())
    return clip(line, TEXT_LIMIT)


def message(event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """``{"text": ..., "blocks": [...]}`` for one notification (no ``channel``).

    Raises ValueError for an unknown event or a payload without what the event needs.
    """
    if event == "approval":
        pending_id = text_of(payload.get("pendingId"))
        tool = text_of(payload.get("tool"))
        args = payload.get("args")
        if not isinstance(args, dict):
            raise ValueError("an approval notification needs args (an object)")
        blocks = slack.approval_blocks(pending_id, tool, args, text_of(payload.get("reason")))
        return {"text": clip(f"Approval needed: {slack.escape(tool)}", TEXT_LIMIT), "blocks": blocks}
    if event == "question":
        pending_id = text_of(payload.get("pendingId"))
        if not pending_id:
            raise ValueError("a question notification needs a pendingId")
        question = text_of(payload.get("question"))
        raw = payload.get("options")
        options = [text_of(o) for o in raw] if isinstance(raw, list) else None
        resolve_url = text_of(payload.get("resolveUrl")) or None
        blocks = slack.question_blocks(pending_id, question, options, resolve_url)
        return {"text": clip(f"Question: {slack.escape(question)}", TEXT_LIMIT), "blocks": blocks}
    if event in ("run_start", "run_finish"):
        return {"text": runtext_of(event, payload)}
    raise ValueError(f"unknown notification event {event!r}")


class SlackNotifier(http.HttpNotifier):
    """Posts notifications to one Slack channel as the bot (a ``Notifier``).

    Its destination is ``"slack #<channel>"``.
    """

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
        Raises :class:`~loopengine.domain.base.errors.ConfigError` for an empty channel or token, an
        ``api_base`` that is not https (or http to a loopback host), or a non-positive timeout.
        """
        channel = channel.strip()
        if not channel:
            raise ConfigError("notifier slack: channel must not be empty")
        if not token:
            raise ConfigError("notifier slack: the bot token must not be empty")
        if timeout <= 0:
            raise ConfigError("notifier slack: timeout must be positive")
        url = check_api_base(api_base) + "/chat.postMessage"
        super().__init__(url, f"slack #{channel.lstrip('#')}", timeout=timeout, transport=transport)
        self._channel = channel
        self._token = token

    def _fail(self, text: str) -> DeliveryError:
        """A DeliveryError whose message is scrubbed of the token, however it got there."""
        return DeliveryError(http.scrub(text, self._token))

    def send(self, notification: Notification) -> str:
        """Post the notification; return ``"slack #<channel>"`` once Slack says ``ok``.

        Raises :class:`~loopengine.domain.base.errors.DeliveryError` for an unknown event or unusable payload,
        a non-2xx answer, ``{"ok": false}`` (naming Slack's error code), a timeout or a
        connection failure.
        """
        content = self._body(
            notification.event,
            lambda: {"channel": self._channel, **message(notification.event, notification.payload)},
        )
        headers = http.json_headers(USER_AGENT, self._token)
        target = f"{self._where}: chat.postMessage at {display(self._url)}"
        # not chained: the httpx exception carries the request, and with it the token
        response = self._post(content, headers, target=target)
        if not response.is_success:
            retry = response.headers.get("Retry-After", "")
            later = f" (retry after {retry} s)" if retry.isdigit() else ""
            raise self._fail(f"{target} answered {http.status(response)}{later}")
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
    :class:`~loopengine.domain.base.errors.ConfigError`. ``clock`` is unused (Slack needs no timestamps).
    """
    channel = setting(config, env, "channel")
    if not channel:
        raise ConfigError("notifier slack: needs channel (a channel id such as C0123456789) or channel_env")
    token = secret(config, env, "token", "slack")
    api_base = setting(config, env, "api_base") or DEFAULT_API_BASE
    return SlackNotifier(channel, token, api_base=api_base)
