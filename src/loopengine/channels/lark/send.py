r"""The ``lark`` channel: post each notification as an interactive card (a custom bot, or the app's bot).

    notifier:
      channel: lark
      config:
        webhook_url_env: LARK_WEBHOOK_URL   # the custom bot's webhook URL: a secret, env only
        secret_env: LARK_BOT_SECRET         # optional: the bot's "signature verification" secret
        magic_link_recipient: lark-ops      # optional: buttons open magic-link pages (see below)
        magic_link_ttl_seconds: 604800      # optional, default 7 days

That is a group's custom bot (:class:`LarkNotifier`). With ``chat_id`` instead of
``webhook_url_env`` the app's bot posts the cards (:mod:`loopengine.channels.lark.app`), whose
buttons can decide in Lark (``callback: true``); :func:`from_config` picks by that key.

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
:class:`~loopengine.domain.base.errors.DeliveryError`. The webhook URL is a bearer credential (its last path
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

**The buttons** are links (``url``): Lark sends card callbacks only to the app that sent the card,
never for a custom bot's, so buttons that decide in Lark need the app's bot
(:mod:`loopengine.channels.lark.app`, chosen by ``chat_id``; ``callback: true`` here is a
:class:`~loopengine.domain.base.errors.ConfigError`). The cards are
:mod:`loopengine.channels.lark.cards`'s:

* with ``magic_link_recipient`` set, each card carries a signed, expiring magic link
  (:mod:`loopengine.channels.magic.token`, secret ``LOOPENGINE_MAGIC_LINK_SECRET``: the one ``/magic/{token}``
  verifies with) and the buttons open that page, where the item is reviewed and decided. The
  decision is recorded as ``decidedBy = <magic_link_recipient>``, so if the rule names approvers
  the recipient must be among them. Anyone in the group holding the card can use the link until it
  expires: that is what sharing it with a group means;
* without it, the buttons link to the payload's ``resolveUrl``. That route only decides on a
  ``POST`` with the API's credentials (``{"decision": "approve"}``, ``{"answer": "..."}``), so the
  card says so; opening it in a browser decides nothing.

The POST itself is :func:`loopengine.channels.http.post` (httpx imported on first send, a
short-lived client per send).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from loopengine.app.ports import Notification, Notifier
from loopengine.channels import http
from loopengine.channels.base import secret
from loopengine.channels.lark.cards import DEFAULT_LINK_TTL, CardMaker
from loopengine.channels.magic import token as magic
from loopengine.domain.base.clock import Clock
from loopengine.domain.base.errors import ConfigError, DeliveryError

if TYPE_CHECKING:
    import httpx

USER_AGENT = "loopengine-lark/0.1"
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


def read_answer(
    response: httpx.Response, target: str, fail: Callable[[str], DeliveryError]
) -> dict[str, Any]:
    """Lark's JSON answer once it says ``code`` 0; ``fail(...)`` for anything else.

    Lark answers ``{"code": 0, "msg": ..., ...}`` (older custom bots: ``"StatusCode"``); another
    HTTP status, another ``code`` or no such JSON is a failure naming the code and Lark's message.
    """
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
        raise fail(f"{target} answered {http.status(response)}{detail}")
    if not isinstance(answer, dict) or not isinstance(code, int) or isinstance(code, bool):
        raise fail(f"{target} answered {response.status_code} without Lark's JSON")
    if code != 0:
        raise fail(f"{target} refused the card: code {code}{said}")
    return answer


class LarkNotifier(http.HttpNotifier):
    """Posts notifications as cards to one Lark/Feishu custom bot webhook (a ``Notifier``).

    Its destination is ``"lark <scheme://host>"``: the URL's path is the bot's token.
    """

    def __init__(
        self,
        webhook_url: str,
        *,
        cards: CardMaker,
        secret: str | None = None,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """Post ``cards`` to ``webhook_url``, signing with ``secret`` (if given) at their clock's time.

        ``transport`` replaces httpx's network transport. Raises
        :class:`~loopengine.domain.base.errors.ConfigError` for a URL that is not https (or http to a
        loopback host) or a non-positive timeout.
        """
        host = _check_url(webhook_url)
        if secret is not None and not secret:
            raise ConfigError("notifier lark: the signing secret must not be empty")
        if timeout <= 0:
            raise ConfigError("notifier lark: timeout must be positive")
        self._cards = cards
        super().__init__(webhook_url, f"lark {host}", timeout=timeout, transport=transport)
        self._secret = secret

    def card(self, event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The card for one notification; ValueError for an unknown event or unusable payload."""
        return self._cards.card(event, payload)

    def _fail(self, text: str) -> DeliveryError:
        """A DeliveryError without the URL, its token path or the secrets, however they got in."""
        return DeliveryError(http.scrub(text, self._secret, self._cards.magic_secret, url=self._url))

    def send(self, notification: Notification) -> str:
        """Post the card; return ``"lark <scheme://host>"`` once Lark answers ``code`` 0.

        Raises :class:`~loopengine.domain.base.errors.DeliveryError` for an unknown event or unusable payload,
        a non-2xx answer, a non-zero ``code``, a timeout or a connection failure.
        """

        def build() -> dict[str, Any]:
            body: dict[str, Any] = {}
            if self._secret is not None:
                timestamp = int(self._cards.clock.now())
                body["timestamp"] = str(timestamp)
                body["sign"] = sign(self._secret, timestamp)
            body["msg_type"] = "interactive"
            body["card"] = self.card(notification.event, notification.payload)
            return body

        content = self._body(notification.event, build)
        headers = http.json_headers(USER_AGENT)
        # not chained: the httpx exception carries the request, and with it the URL
        response = self._post(content, headers, target=self._where)
        read_answer(response, self._where, self._fail)
        return self._where


def cards_from_config(config: Mapping[str, Any], env: Mapping[str, str], clock: Clock) -> CardMaker:
    """The card settings of a ``lark`` block: ``magic_link_recipient``, its TTL, ``callback``.

    ``magic_link_recipient`` needs ``LOOPENGINE_MAGIC_LINK_SECRET`` set (the secret
    ``/magic/{token}`` verifies with).
    """
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
    callback = config.get("callback", False)
    if not isinstance(callback, bool):
        raise ConfigError("notifier lark: callback must be true or false")
    return CardMaker(
        clock=clock,
        magic_secret=magic_secret,
        magic_recipient=recipient,
        link_ttl=float(ttl),
        callback=callback,
    )


def from_config(config: dict[str, Any], env: Mapping[str, str], clock: Clock) -> Notifier:
    """An agent's Lark notifier: the app's bot (``chat_id``) or a custom bot (``webhook_url_env``).

    The webhook URL, the bot's signing secret and the app secret only ever come from the
    environment; inline values are a :class:`~loopengine.domain.base.errors.ConfigError`, as is
    ``callback: true`` on a custom bot (Lark sends no callbacks for its cards).
    """
    if "chat_id" in config or "chat_id_env" in config:
        from loopengine.channels.lark import app  # the app's bot: token exchange, im/v1/messages

        return app.from_config(config, env, clock)
    cards = cards_from_config(config, env, clock)
    if cards.callback:
        raise ConfigError(
            "notifier lark: callback buttons need the Lark app to send the cards (chat_id and "
            "app_secret_env): Lark sends no callbacks for a custom bot's cards"
        )
    webhook_url = secret(config, env, "webhook_url", "lark").strip()
    signing = (
        secret(config, env, "secret", "lark") if ("secret" in config or "secret_env" in config) else None
    )
    return LarkNotifier(webhook_url, cards=cards, secret=signing)
