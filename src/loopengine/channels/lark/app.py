"""The ``lark`` channel through the Lark app's bot: cards Lark sends callbacks for.

    notifier:
      channel: lark
      config:
        chat_id: oc_0123456789abcdef        # the group the app's bot posts to (the bot must be in it)
        app_secret_env: LARK_APP_SECRET     # the app's App Secret: a secret, env only
        app_id_env: LOOPENGINE_LARK_APP_ID  # optional (this default), or app_id: cli_...
        api_base: https://open.larksuite.com/open-apis   # optional, default Feishu's
        callback: true                      # Approve / Deny / option buttons decide in Lark
        magic_link_recipient: lark-ops      # optional: a page to review, and free-text answers

A custom bot (:mod:`loopengine.channels.lark.send`) can only show link buttons: Lark delivers card
callbacks to the app that sent the card, so buttons that decide in Lark need the cards sent by the
app whose callbacks ``POST /integrations/lark/interactions`` accepts (``LOOPENGINE_LARK_APP_ID``,
which is why ``app_id_env`` defaults to it). The cards are :mod:`loopengine.channels.lark.cards`'s.

**The requests** (Lark's server-side API, bot permission ``im:message:send_as_bot``):

1. ``POST {api_base}/auth/v3/tenant_access_token/internal`` with ``{"app_id", "app_secret"}``
   answers ``{"code": 0, "tenant_access_token", "expire": <seconds>}``. The token is kept until
   :data:`REFRESH_BEFORE` seconds before it expires (Lark hands out a new one in the last half
   hour of the old one's two hours), and dropped when Lark refuses a message;
2. ``POST {api_base}/im/v1/messages?receive_id_type=chat_id`` with ``Authorization: Bearer
   <token>`` and ``{"receive_id": <chat_id>, "msg_type": "interactive", "content": <the card as a
   JSON string>}`` answers ``{"code": 0, "data": {"message_id": ...}}``.

Any other status, a non-zero ``code``, a timeout or a refused connection is a
:class:`~loopengine.domain.base.errors.DeliveryError` (the outbox retries it); messages never carry the
app secret or the token. Written against Lark's published API reference and its official SDKs'
models, not exercised against a real tenant: if Lark refuses with a ``code``, check here first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from loopengine.app.ports import Notification
from loopengine.channels import http
from loopengine.channels.base import secret, setting
from loopengine.channels.lark.cards import CardMaker
from loopengine.channels.lark.send import USER_AGENT, cards_from_config, read_answer
from loopengine.domain.base.clock import Clock
from loopengine.domain.base.errors import ConfigError, DeliveryError

if TYPE_CHECKING:
    import httpx

APP_ID_ENV = "LOOPENGINE_LARK_APP_ID"
DEFAULT_API_BASE = "https://open.feishu.cn/open-apis"
TOKEN_PATH = "/auth/v3/tenant_access_token/internal"
MESSAGES_PATH = "/im/v1/messages?receive_id_type=chat_id"
REFRESH_BEFORE = 600.0
"""Seconds before its expiry a tenant access token is replaced."""


def _check_api_base(api_base: str) -> str:
    """The API base without a trailing slash; ConfigError unless https (or http to loopback)."""
    subject = "notifier lark: api_base"
    parts = http.split_url(api_base, subject, ConfigError)
    if not parts.hostname or http.has_credentials(parts) or parts.query or parts.fragment:
        raise ConfigError(f"{subject} must be an absolute https:// URL without credentials or query")
    http.require_https(parts, subject, ConfigError)
    return api_base.rstrip("/")


class LarkAppNotifier(http.HttpNotifier):
    """Posts notifications as cards to one chat as the Lark app's bot (a ``Notifier``).

    Its destination is ``"lark app <app_id> chat <chat_id>"``.
    """

    def __init__(
        self,
        chat_id: str,
        app_id: str,
        app_secret: str,
        *,
        cards: CardMaker,
        api_base: str = DEFAULT_API_BASE,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """Post ``cards`` to ``chat_id`` as app ``app_id``; ConfigError for empty or unsafe settings."""
        if not chat_id.strip() or not app_id.strip():
            raise ConfigError("notifier lark: chat_id and the app id must not be empty")
        if not app_secret:
            raise ConfigError("notifier lark: the app secret must not be empty")
        if timeout <= 0:
            raise ConfigError("notifier lark: timeout must be positive")
        base = _check_api_base(api_base)
        where = f"lark app {app_id.strip()} chat {chat_id.strip()}"
        super().__init__(base + MESSAGES_PATH, where, timeout=timeout, transport=transport)
        self._base = base
        self._chat_id = chat_id.strip()
        self._app_id = app_id.strip()
        self._app_secret = app_secret
        self._cards = cards
        self._token: tuple[str, float] | None = None  # (tenant access token, good until)

    @property
    def cards(self) -> CardMaker:
        """What the posted cards look like."""
        return self._cards

    def _fail(self, text: str) -> DeliveryError:
        """A DeliveryError without the app secret, the token or the magic-link secret."""
        token = self._token[0] if self._token is not None else None
        return DeliveryError(http.scrub(text, self._app_secret, token, self._cards.magic_secret))

    def _display(self, path: str) -> str:
        return f"{http.origin(self._base)}{urlsplit(self._base + path).path}"

    def tenant_token(self) -> str:
        """A tenant access token: the kept one while it is good, else a new one from Lark."""
        now = self._cards.clock.now()
        if self._token is not None and now < self._token[1]:
            return self._token[0]
        self._token = None
        target = f"{self._where}: {self._display(TOKEN_PATH)}"
        body = http.compact_json({"app_id": self._app_id, "app_secret": self._app_secret})
        response = self._post(body, http.json_headers(USER_AGENT), target=target, url=self._base + TOKEN_PATH)
        answer = read_answer(response, target, self._fail)
        token, expire = answer.get("tenant_access_token"), answer.get("expire")
        if not isinstance(token, str) or not token or isinstance(expire, bool) or not isinstance(expire, int):
            raise self._fail(f"{target} answered without a tenant_access_token and its expire")
        self._token = (token, now + max(0.0, expire - REFRESH_BEFORE))
        return token

    def send(self, notification: Notification) -> str:
        """Post the card; return the destination once Lark answers ``code`` 0.

        Raises :class:`~loopengine.domain.base.errors.DeliveryError` for an unknown event or unusable
        payload, a token Lark will not give, a non-2xx answer, a non-zero ``code``, a timeout or
        a connection failure.
        """

        def build() -> dict[str, Any]:
            card = self._cards.card(notification.event, notification.payload)
            content = json.dumps(card, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            return {"receive_id": self._chat_id, "msg_type": "interactive", "content": content}

        data = self._body(notification.event, build)
        headers = http.json_headers(USER_AGENT, self.tenant_token())
        target = f"{self._where}: {self._display(MESSAGES_PATH)}"
        response = self._post(data, headers, target=target)
        try:
            read_answer(response, target, self._fail)
        except DeliveryError:
            self._token = None  # perhaps revoked or expired early: the next attempt asks again
            raise
        return self._where


def from_config(config: Mapping[str, Any], env: Mapping[str, str], clock: Clock) -> LarkAppNotifier:
    """The app's bot: ``{chat_id | chat_id_env, app_secret_env, app_id | app_id_env, api_base?, ...}``.

    The app secret only ever comes from the environment (``app_secret_env``); the app id defaults
    to ``LOOPENGINE_LARK_APP_ID``, the app whose callbacks the interaction route accepts.
    """
    if "webhook_url" in config or "webhook_url_env" in config:
        raise ConfigError("notifier lark: give either chat_id (the app's bot) or webhook_url_env, not both")
    chat_id = setting(config, env, "chat_id")
    if not chat_id:
        raise ConfigError("notifier lark: chat_id (or chat_id_env) must name the chat to post to")
    app_id = setting(config, env, "app_id", APP_ID_ENV)
    if not app_id:
        raise ConfigError(f"notifier lark: the app's bot needs app_id, app_id_env or {APP_ID_ENV}")
    app_secret = secret(config, env, "app_secret", "lark")
    api_base = setting(config, env, "api_base") or DEFAULT_API_BASE
    cards = cards_from_config(config, env, clock)
    return LarkAppNotifier(chat_id, app_id, app_secret, cards=cards, api_base=api_base)
