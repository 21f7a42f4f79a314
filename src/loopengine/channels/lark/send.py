r"""The ``lark`` channel: post each notification as an interactive card to a Lark/Feishu group bot.

    notifier:
      channel: lark
      config:
        webhook_url_env: LARK_WEBHOOK_URL   # the custom bot's webhook URL: a secret, env only
        secret_env: LARK_BOT_SECRET         # optional: the bot's "signature verification" secret
        magic_link_recipient: lark-ops      # optional: buttons open magic-link pages (see below)
        magic_link_ttl_seconds: 604800      # optional, default 7 days

**Lower confidence than the other channels.** This was written against Lark/Feishu's public
documentation of custom bots and message cards ("card JSON 1.0": ``config`` / ``header`` /
``elements`` with ``div``, ``action``, ``button``, ``note`` tags), not exercised against a real Lark
tenant. The field names used are the ones that documentation and several independent client
libraries agree on, but Lark has revised its card schema more than once (a "2.0" schema uses
``body.elements`` instead); if cards render wrongly or Lark answers with a non-zero ``code``,
check this module first.

**The request.** ``POST <webhook URL>`` with ``{"msg_type": "interactive", "card": {...}}``. Lark
answers HTTP 200 with ``{"code": 0, ...}`` on success (older deployments also send
``"StatusCode": 0``); any other ``code`` (e.g. 19021, bad signature; 19024, keyword check failed),
another HTTP status, a timeout or a refused connection is a
:class:`~loopengine.domain.errors.DeliveryError`. The webhook URL is a bearer credential (its last path
segment is the bot's token), so error messages name only its ``scheme://host``.

**The signature** (when ``secret_env`` is set, matching "signature verification" in the bot's
security settings). The body gets ``"timestamp"`` (Unix seconds, as a string) and ``"sign"`` =
``base64(HMAC-SHA256(key = "<timestamp>\n<secret>", message = b""))``: the secret and timestamp
are the HMAC *key* and the message is empty. Source: the code samples of Lark's custom bot guide
(open.feishu.cn/document/client-docs/bot-v3/add-custom-bot, "signature verification"), as
reproduced by several independent clients (Go, Node and Python ones compute exactly this); the
official page itself was not re-read for this module. Uncertainty: the scheme is unusual, and at
least one third-party client (the ``openlark-webhook`` Rust crate) keys the HMAC with the secret
over ``"<timestamp>\n<secret>"`` instead; Lark answers code 19021 to a wrong signature, so a 19021
from this module means: check this first. Lark refuses timestamps more than an hour off its clock.

**The buttons.** Lark's card buttons can call back into an app, but loopengine has no Lark callback
route (Slack's is the one interactive channel), so the buttons here are plain links (``url``):

* with ``magic_link_recipient`` set, each card carries a signed, expiring magic link
  (:mod:`loopengine.channels.magic.token`, secret ``LOOPENGINE_MAGIC_LINK_SECRET``: the one ``/magic/{token}``
  verifies with) and the buttons open that page, where the item is reviewed and decided. The
  decision is recorded as ``decidedBy = <magic_link_recipient>``, so if the rule names approvers
  the recipient must be among them. Anyone in the group holding the card can use the link until it
  expires: that is what sharing it with a group means;
* without it, the buttons link to the payload's ``resolveUrl``. That route only decides on a
  ``POST`` with the API's credentials (``{"decision": "approve"}``, ``{"answer": "..."}``), so the
  card says so; opening it in a browser decides nothing.

Everything the model wrote (arguments, reason, question, final text) goes into ``plain_text``
elements, never ``lark_md``, so it cannot mention people (``<at ...>``) or add links.

The POST itself is :func:`loopengine.channels.http.post` (httpx imported on first send, a
short-lived client per send).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from loopengine.app.ports import Notification
from loopengine.channels import http
from loopengine.channels.base import clip, secret, text_of
from loopengine.channels.magic import token as magic
from loopengine.domain.clock import Clock
from loopengine.domain.errors import ConfigError, DeliveryError

if TYPE_CHECKING:
    import httpx

USER_AGENT = "loopengine-lark/0.1"
DEFAULT_LINK_TTL = 7 * 24 * 3600
TEXT_LIMIT = 4000
"""Characters per card text element (Lark limits a whole card to about 30 KB)."""
_MAX_DETAIL = 120


def sign(secret: str, timestamp: int) -> str:
    r"""Lark's custom-bot signature: ``base64(HMAC-SHA256(key="<timestamp>\n<secret>", msg=b""))``."""
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode("ascii")


def _check_url(url: str) -> str:
    """The URL's loggable ``scheme://host[:port]``; ConfigError unless https (or http to loopback).

    The messages never quote the URL: its path is the bot's token.
    """
    subject = "notifier lark: the webhook URL"
    parts = http.split_url(url, subject, ConfigError)
    if not parts.hostname or http.has_credentials(parts):
        raise ConfigError(f"{subject} must be an absolute https:// URL")
    http.require_https(parts, subject, ConfigError)
    return http.origin(url)


def _plain(text: str) -> dict[str, Any]:
    return {"tag": "plain_text", "content": clip(text, TEXT_LIMIT)}


def _div(text: str) -> dict[str, Any]:
    return {"tag": "div", "text": _plain(text)}


def _note(text: str) -> dict[str, Any]:
    return {"tag": "note", "elements": [_plain(text)]}


def _button(label: str, url: str, kind: str) -> dict[str, Any]:
    return {"tag": "button", "text": {"tag": "plain_text", "content": label}, "type": kind, "url": url}


def _card(title: str, template: str, elements: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "config": {"wide_screen_mode": True},
        "header": {"template": template, "title": {"tag": "plain_text", "content": clip(title, 200)}},
        "elements": elements,
    }


class LarkNotifier(http.HttpNotifier):
    """Posts notifications as cards to one Lark/Feishu custom bot webhook (a ``Notifier``).

    Its destination is ``"lark <scheme://host>"``: the URL's path is the bot's token.
    """

    def __init__(
        self,
        webhook_url: str,
        *,
        clock: Clock,
        secret: str | None = None,
        magic_secret: str | None = None,
        magic_recipient: str | None = None,
        link_ttl: float = DEFAULT_LINK_TTL,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """Post to ``webhook_url``, signing with ``secret`` (if given) at ``clock`` time.

        With ``magic_secret`` and ``magic_recipient``, cards link to magic-link pages valid for
        ``link_ttl`` seconds; otherwise to the payload's ``resolveUrl``. ``transport`` replaces
        httpx's network transport. Raises :class:`~loopengine.domain.errors.ConfigError` for a URL that
        is not https (or http to a loopback host), half a magic-link setup, or a non-positive
        timeout or link lifetime.
        """
        host = _check_url(webhook_url)
        if secret is not None and not secret:
            raise ConfigError("notifier lark: the signing secret must not be empty")
        if (magic_secret is None) != (magic_recipient is None) or magic_secret == "" or magic_recipient == "":
            raise ConfigError("notifier lark: magic links need both a secret and a recipient")
        if timeout <= 0 or link_ttl <= 0:
            raise ConfigError("notifier lark: timeout and magic_link_ttl_seconds must be positive")
        super().__init__(webhook_url, f"lark {host}", timeout=timeout, transport=transport)
        self._secret = secret
        self._magic_secret = magic_secret
        self._magic_recipient = magic_recipient
        self._link_ttl = link_ttl
        self._clock = clock

    # -- the card ---------------------------------------------------------------------------

    def _link(self, payload: Mapping[str, Any]) -> tuple[str | None, str]:
        """Where the buttons go, and the note that says what they do."""
        pending_id = text_of(payload.get("pendingId"))
        resolve_url = text_of(payload.get("resolveUrl"))
        if self._magic_secret is not None and self._magic_recipient is not None and pending_id:
            # resolveUrl is <public_url>/pending-{approvals,questions}/<id>/...: the magic page
            # lives under the same public URL
            for route in (
                f"/pending-approvals/{pending_id}/resolve",
                f"/pending-questions/{pending_id}/answer",
            ):
                if resolve_url.endswith(route):
                    expires = self._clock.now() + self._link_ttl
                    token = magic.issue_token(self._magic_secret, pending_id, self._magic_recipient, expires)
                    link = magic.magic_url(resolve_url[: -len(route)], token)
                    return link, "The buttons open a page to review and decide."
        if resolve_url:
            return resolve_url, (
                "The buttons open the resolve route; it decides only on a POST with the API's credentials."
            )
        return None, "Decide in the app."

    def card(self, event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The card for one notification; ValueError for an unknown event or unusable payload."""
        agent = text_of(payload.get("agent")) or "?"
        pending_id = text_of(payload.get("pendingId"))
        if event == "approval":
            tool = text_of(payload.get("tool"))
            args = payload.get("args")
            if not pending_id or not tool or not isinstance(args, dict):
                raise ValueError("an approval notification needs pendingId, tool and args")
            url, how = self._link(payload)
            elements = []
            reason = text_of(payload.get("reason"))
            if reason:
                elements.append(_div(reason))
            shown = json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False, default=str)
            elements.append(_div(f"Arguments:\n{shown}"))
            if url is not None:
                buttons = [_button("Approve…", url, "primary"), _button("Deny…", url, "danger")]
                elements.append({"tag": "action", "actions": buttons})
            elements.append(_note(f"{how} Agent {agent}, pendingId {pending_id}"))
            return _card(f"Approval needed: {tool}", "orange", elements)
        if event == "question":
            if not pending_id:
                raise ValueError("a question notification needs a pendingId")
            url, how = self._link(payload)
            elements = [_div(text_of(payload.get("question")))]
            options = payload.get("options")
            if isinstance(options, list) and options:
                elements.append(_div("Options:\n" + "\n".join(f"• {text_of(o)}" for o in options)))
            if url is not None:
                elements.append({"tag": "action", "actions": [_button("Answer…", url, "primary")]})
            elements.append(_note(f"{how} Agent {agent}, pendingId {pending_id}"))
            return _card(f"Question from {agent}", "blue", elements)
        turn = text_of(payload.get("turnId"))
        if event == "run_start":
            trigger = text_of(payload.get("trigger")) or "message"
            return _card(f"Run started: {agent}", "grey", [_note(f"Trigger {trigger}, turn {turn}")])
        if event == "run_finish":
            stop = text_of(payload.get("stopReason")) or "finished"
            elements = []
            final = text_of(payload.get("text")).strip()
            if final:
                elements.append(_div(final))
            elements.append(_note(f"Stop reason {stop}, turn {turn}"))
            template = "green" if stop == "end_turn" else "red"
            return _card(f"Run finished: {agent}", template, elements)
        raise ValueError(f"unknown notification event {event!r}")

    # -- sending ----------------------------------------------------------------------------

    def _fail(self, text: str) -> DeliveryError:
        """A DeliveryError without the URL, its token path or the secrets, however they got in."""
        return DeliveryError(http.scrub(text, self._secret, self._magic_secret, url=self._url))

    def send(self, notification: Notification) -> str:
        """Post the card; return ``"lark <scheme://host>"`` once Lark answers ``code`` 0.

        Raises :class:`~loopengine.domain.errors.DeliveryError` for an unknown event or unusable payload,
        a non-2xx answer, a non-zero ``code``, a timeout or a connection failure.
        """
        try:
            body: dict[str, Any] = {}
            if self._secret is not None:
                timestamp = int(self._clock.now())
                body["timestamp"] = str(timestamp)
                body["sign"] = sign(self._secret, timestamp)
            body["msg_type"] = "interactive"
            body["card"] = self.card(notification.event, notification.payload)
            content = http.compact_json(body)
        except (TypeError, ValueError) as exc:
            raise self._fail(f"{self._where}: cannot post this {notification.event}: {exc}") from None
        headers = {"Content-Type": http.JSON_UTF8, "User-Agent": USER_AGENT}
        # not chained: the httpx exception carries the request, and with it the URL
        response = self._post(content, headers, target=self._where)
        try:
            answer = response.json()
        except ValueError:
            answer = None
        said = ""
        code: Any = None
        if isinstance(answer, dict):
            code = answer.get("code", answer.get("StatusCode"))
            msg = answer.get("msg", answer.get("StatusMessage"))
            if isinstance(msg, str) and msg.isprintable():
                said = f" {msg[:_MAX_DETAIL]}"
        if not response.is_success:
            detail = f" (code {code}{said})" if isinstance(code, int) else ""
            raise self._fail(f"{self._where} answered {http.status(response)}{detail}")
        if not isinstance(code, int) or isinstance(code, bool):
            raise self._fail(f"{self._where} answered {response.status_code} without Lark's JSON")
        if code != 0:
            raise self._fail(f"{self._where} refused the card: code {code}{said}")
        return self._where


def from_config(config: dict[str, Any], env: Mapping[str, str], clock: Clock) -> LarkNotifier:
    """An agent's Lark bot: ``{webhook_url_env, secret_env?, magic_link_recipient?, ...}``.

    The webhook URL and the signing secret only ever come from the environment; inline values
    are a :class:`~loopengine.domain.errors.ConfigError`. ``magic_link_recipient`` needs
    ``LOOPENGINE_MAGIC_LINK_SECRET`` set (the secret ``/magic/{token}`` verifies with).
    """
    webhook_url = secret(config, env, "webhook_url", "lark").strip()
    signing = (
        secret(config, env, "secret", "lark") if ("secret" in config or "secret_env" in config) else None
    )
    recipient = config.get("magic_link_recipient")
    magic_secret: str | None = None
    if recipient is not None:
        if not isinstance(recipient, str) or not recipient.strip():
            raise ConfigError("notifier lark: magic_link_recipient must be a non-empty string")
        recipient = recipient.strip()
        magic_secret = env.get(magic.SECRET_ENV) or None
        if magic_secret is None:
            raise ConfigError(f"notifier lark: magic_link_recipient needs {magic.SECRET_ENV} to be set")
    ttl = config.get("magic_link_ttl_seconds", DEFAULT_LINK_TTL)
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0:
        raise ConfigError("notifier lark: magic_link_ttl_seconds must be a positive number")
    return LarkNotifier(
        webhook_url,
        clock=clock,
        secret=signing,
        magic_secret=magic_secret,
        magic_recipient=recipient,
        link_ttl=float(ttl),
    )
