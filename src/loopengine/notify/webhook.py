"""The ``webhook`` channel: a signed JSON POST per notification.

The body is ``{"event": ..., **payload}`` serialised once, compactly; the signature (see
:mod:`loopengine.notify.signing`) is computed over exactly those bytes and sent in the event's
header. Any 2xx answer counts as delivered. Anything else — another status (redirects are not
followed), a timeout, a refused connection — raises :class:`~loopengine.errors.DeliveryError`,
whose message names the destination (without query string or credentials) and never the secret.

httpx is imported on first send, so importing this module stays cheap for routes that never
notify. Each send uses its own short-lived client, so nothing is left open between sends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from loopengine.clock import Clock
from loopengine.errors import ConfigError, DeliveryError
from loopengine.notify.signing import sign, signature_header
from loopengine.ports import Notification

if TYPE_CHECKING:
    import httpx

USER_AGENT = "loopengine-webhook/0.1"
ENV_URL = "LOOPENGINE_DEFAULT_WEBHOOK_URL"
ENV_SECRET = "LOOPENGINE_DEFAULT_WEBHOOK_SECRET"


def _display_url(url: str) -> str:
    """``scheme://host[:port]/path``: the URL without credentials, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}{parts.path or '/'}"


class WebhookNotifier:
    """Delivers notifications as HMAC-signed JSON POSTs to one URL (a ``Notifier``)."""

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
        Raises :class:`~loopengine.errors.ConfigError` for a URL that is not absolute http(s),
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
        self._url = url
        self._secret = secret
        self._clock = clock
        self._timeout = timeout
        self._transport = transport
        self._display = _display_url(url)

    @property
    def destination(self) -> str:
        """Where this notifier posts, safe to log (no credentials, query or fragment)."""
        return self._display

    def __repr__(self) -> str:
        """Show the destination, never the secret."""
        return f"WebhookNotifier({self._display!r})"

    def _body(self, notification: Notification) -> bytes:
        """Serialise once; ``notification.event`` wins over an ``event`` key in the payload."""
        document: dict[str, Any] = {"event": notification.event}
        document.update((k, v) for k, v in notification.payload.items() if k != "event")
        try:
            text = json.dumps(document, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise DeliveryError(
                f"{notification.event} notification payload is not JSON-serialisable: {exc}"
            ) from exc
        return text.encode("utf-8")

    def _fail(self, message: str) -> DeliveryError:
        """A DeliveryError whose message is scrubbed of the secret, however it got there."""
        return DeliveryError(message.replace(self._secret, "[redacted]"))

    def send(self, notification: Notification) -> str:
        """POST the signed notification; return ``"webhook <url> (<status>)"`` on 2xx.

        Raises :class:`~loopengine.errors.DeliveryError` on an unknown event, a payload that is
        not JSON, a non-2xx answer, a timeout or a connection failure.
        """
        try:
            header = signature_header(notification.event)
        except ValueError as exc:
            raise self._fail(str(exc)) from exc
        body = self._body(notification)
        timestamp = int(self._clock.now())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            header: sign(self._secret, body, timestamp),
        }

        import httpx  # deferred: keep `import loopengine.notify.webhook` cheap

        target = f"webhook {self._display}"
        try:
            with httpx.Client(
                timeout=self._timeout, transport=self._transport, follow_redirects=False
            ) as client:
                response = client.post(self._url, content=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise self._fail(f"{target} timed out after {self._timeout:g} s ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise self._fail(f"{target} failed: {type(exc).__name__}: {exc}") from exc
        if not response.is_success:
            phrase = f" {response.reason_phrase}" if response.reason_phrase else ""
            raise self._fail(f"{target} answered {response.status_code}{phrase}")
        return f"{target} ({response.status_code})"


def from_config(config: dict[str, Any], env: Mapping[str, str], clock: Clock) -> WebhookNotifier:
    """An agent's own webhook: ``{url | url_env, secret_env}`` (the secret only from the env)."""
    from loopengine.notify.channels import secret, setting

    url = setting(config, env, "url")
    if not url:
        raise ConfigError("notifier webhook: needs url (or url_env naming a set variable)")
    return WebhookNotifier(url, secret(config, env, "secret", "webhook"), clock=clock)


def from_env(environ: Mapping[str, str], clock: Clock) -> WebhookNotifier | None:
    """The deployment-wide default webhook, or ``None`` when none is configured.

    Reads ``LOOPENGINE_DEFAULT_WEBHOOK_URL`` and ``LOOPENGINE_DEFAULT_WEBHOOK_SECRET`` (blank
    counts as unset; the URL is stripped, the secret is used exactly as given). A URL needs its
    secret: a URL without one raises :class:`~loopengine.errors.ConfigError` rather than sending
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
