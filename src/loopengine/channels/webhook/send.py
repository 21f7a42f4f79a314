"""The ``webhook`` channel: a signed JSON POST per notification.

The body is ``{"event": ..., **payload}`` serialised once, compactly; the signature (see
:mod:`loopengine.channels.signing`) is computed over exactly those bytes and sent in the event's
header. Any 2xx answer counts as delivered. Anything else — another status (redirects are not
followed), a timeout, a refused connection — raises :class:`~loopengine.domain.base.errors.DeliveryError`,
whose message names the destination (without query string or credentials) and never the secret.

httpx is imported on first send, so importing this module stays cheap for routes that never
notify. Each send uses its own short-lived client, so nothing is left open between sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from loopengine.app.ports import Notification
from loopengine.channels import http
from loopengine.channels.base import notification_body, secret, setting
from loopengine.channels.signing import sign, signature_header
from loopengine.domain.base.clock import Clock
from loopengine.domain.base.errors import ConfigError, DeliveryError

if TYPE_CHECKING:
    import httpx

USER_AGENT = "loopengine-webhook/0.1"
ENV_URL = "LOOPENGINE_DEFAULT_WEBHOOK_URL"
ENV_SECRET = "LOOPENGINE_DEFAULT_WEBHOOK_SECRET"


def _display_url(url: str) -> str:
    """``scheme://host[:port]/path``: the URL without credentials, query or fragment."""
    return f"{http.origin(url)}{urlsplit(url).path or '/'}"


class WebhookNotifier(http.HttpNotifier):
    """Delivers notifications as HMAC-signed JSON POSTs to one URL (a ``Notifier``).

    Its destination is the URL without credentials, query or fragment.
    """

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        clock: Clock,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """Target ``url``, signing with ``secret`` at ``clock`` time.

        ``transport`` replaces httpx's network transport (tests pass ``httpx.MockTransport``).
        Raises :class:`~loopengine.domain.base.errors.ConfigError` for a URL that is not absolute http(s),
        an empty secret or a non-positive timeout.
        """
        try:
            parts = urlsplit(url)
            _ = parts.port  # raises ValueError for a non-numeric port
        except ValueError as exc:
            raise ConfigError(f"webhook URL is not a valid URL: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("webhook URL must be an absolute http:// or https:// URL")
        if not secret:
            raise ConfigError("webhook secret must not be empty")
        if timeout <= 0:
            raise ConfigError("webhook timeout must be positive")
        super().__init__(url, _display_url(url), timeout=timeout, transport=transport)
        self._secret = secret
        self._clock = clock

    def _fail(self, message: str) -> DeliveryError:
        """A DeliveryError whose message is scrubbed of the secret, however it got there."""
        return DeliveryError(http.scrub(message, self._secret))

    def send(self, notification: Notification) -> str:
        """POST the signed notification; return ``"webhook <url> (<status>)"`` on 2xx.

        Raises :class:`~loopengine.domain.base.errors.DeliveryError` on an unknown event, a payload that is
        not JSON, a non-2xx answer, a timeout or a connection failure.
        """
        try:
            header = signature_header(notification.event)
        except ValueError as exc:
            raise self._fail(str(exc)) from exc
        body = notification_body(notification).encode("utf-8")  # serialised once, then signed
        timestamp = int(self._clock.now())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            header: sign(self._secret, body, timestamp),
        }
        target = f"webhook {self._where}"
        response = self._post(body, headers, target=target, chain=True)
        if not response.is_success:
            raise self._fail(f"{target} answered {http.status(response)}")
        return f"{target} ({response.status_code})"


def from_config(config: dict[str, Any], env: Mapping[str, str], clock: Clock) -> WebhookNotifier:
    """An agent's own webhook: ``{url | url_env, secret_env}`` (the secret only from the env)."""
    url = setting(config, env, "url")
    if not url:
        raise ConfigError("notifier webhook: needs url (or url_env naming a set variable)")
    return WebhookNotifier(url, secret(config, env, "secret", "webhook"), clock=clock)


def from_env(environ: Mapping[str, str], clock: Clock) -> WebhookNotifier | None:
    """The deployment-wide default webhook, or ``None`` when none is configured.

    Reads ``LOOPENGINE_DEFAULT_WEBHOOK_URL`` and ``LOOPENGINE_DEFAULT_WEBHOOK_SECRET`` (blank
    counts as unset; the URL is stripped, the secret is used exactly as given). A URL needs its
    secret: a URL without one raises :class:`~loopengine.domain.base.errors.ConfigError` rather than sending
    unsigned webhooks. A secret without a URL configures nothing and returns ``None``.
    """
    url = environ.get(ENV_URL, "").strip()
    secret = environ.get(ENV_SECRET, "")
    if not url:
        return None
    if not secret.strip():
        raise ConfigError(
            f"{ENV_URL} is set but {ENV_SECRET} is not: "
            "the default webhook needs a secret to sign its requests"
        )
    return WebhookNotifier(url, secret, clock=clock)
