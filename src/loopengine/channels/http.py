"""Outgoing HTTP for the webhook, Slack and Lark channels: one POST, and what its errors may say.

:func:`post` sends one request with a short-lived httpx client (nothing stays open between sends),
on the process's one TLS context (:func:`tls_context`), never follows redirects and turns a timeout
or a refused connection into
:class:`~loopengine.domain.base.errors.DeliveryError`. httpx is imported on first send, so importing a channel
stays cheap for routes that never notify. :class:`HttpNotifier` is what the notifiers built on it
keep. What the answer means (any 2xx, Slack's ``ok``, Lark's ``code``) stays with each channel.

Many of these URLs are credentials (a Slack ``response_url``, a Lark bot's webhook), so messages
name a URL by its :func:`origin` and pass through :func:`scrub`; the httpx exception (which carries
the request, its URL and headers) is not chained unless the caller says so.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urlsplit

from loopengine.domain.base.errors import DeliveryError

if TYPE_CHECKING:
    import ssl

    import httpx

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""The hosts plain ``http://`` may go to (local receivers in tests and development)."""
JSON_UTF8 = "application/json; charset=utf-8"


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's one client TLS context, built on first use and shared by every send.

    It is httpx's default: certifi's CAs, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``. Building one
    parses the whole CA bundle, tens of milliseconds of CPU, which a client per send used to pay
    each time. A context holds no connection, so threads may share it, and a process forked later
    (``loopengine dev``'s environments) may inherit it.
    """
    import httpx

    return httpx.create_ssl_context()


def origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL (an IPv6 host in brackets): the part safe to log."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}"


def split_url(url: str, subject: str, error: Callable[[str], Exception]) -> SplitResult:
    """``url`` split; ``error("<subject> is not a valid URL")`` if it (or its port) does not parse."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError:
        raise error(f"{subject} is not a valid URL") from None
    return parts


def has_credentials(parts: SplitResult) -> bool:
    """Whether the URL carries ``user[:password]@``."""
    return parts.username is not None or parts.password is not None


def require_https(parts: SplitResult, subject: str, error: Callable[[str], Exception]) -> None:
    """Raise ``error(...)`` unless the URL is https, or http to a loopback host."""
    host = parts.hostname or ""
    if parts.scheme == "https" or (parts.scheme == "http" and host in LOOPBACK_HOSTS):
        return
    raise error(f"{subject} must be https:// (http:// only to 127.0.0.1 or localhost)")


def scrub(text: str, *secrets: str | None, url: str = "", url_mark: str = "[redacted]") -> str:
    """``text`` without ``url`` (as ``url_mark``), any of ``secrets`` or the URL's path.

    However they got in (an httpx message, an answer's body). The path (when longer than ``/``)
    becomes ``/[redacted]``: it is where a credential URL keeps its token.
    """
    if url:
        text = text.replace(url, url_mark)
    for hidden in secrets:
        if hidden:
            text = text.replace(hidden, "[redacted]")
    path = urlsplit(url).path if url else ""
    if len(path) > 1:
        text = text.replace(path, "/[redacted]")
    return text


def compact_json(document: Any) -> bytes:
    """``document`` as compact UTF-8 JSON; TypeError or ValueError when it is not JSON."""
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def json_headers(user_agent: str, token: str | None = None) -> dict[str, str]:
    """A JSON POST's headers, with ``Authorization: Bearer <token>`` when there is a ``token``."""
    bearer = {} if token is None else {"Authorization": f"Bearer {token}"}
    return {"Content-Type": JSON_UTF8, **bearer, "User-Agent": user_agent}


def status(response: httpx.Response) -> str:
    """``"<status> <reason phrase>"``: an answer as an error message quotes it."""
    phrase = f" {response.reason_phrase}" if response.reason_phrase else ""
    return f"{response.status_code}{phrase}"


def post(
    url: str,
    content: bytes,
    headers: Mapping[str, str],
    *,
    target: str,
    timeout: float,
    transport: httpx.BaseTransport | None = None,
    fail: Callable[[str], DeliveryError] = DeliveryError,
    detail: Callable[[str], str] = str,
    chain: bool = False,
) -> httpx.Response:
    """POST ``content`` to ``url``; the answer, whatever its status.

    ``transport`` replaces httpx's network transport (tests pass ``httpx.MockTransport``). A
    timeout raises ``fail("<target> timed out after <timeout> s (<type>)")``, any other transport
    error ``fail("<target> failed: <type>: <detail(message)>")``, from the httpx exception only when
    ``chain`` (it carries the request, and with it the URL and headers).
    """
    import httpx  # deferred: keep importing a channel cheap

    try:
        client = httpx.Client(
            timeout=timeout, transport=transport, follow_redirects=False, verify=tls_context()
        )
        with client:
            return client.post(url, content=content, headers=headers)
    except httpx.TimeoutException as exc:
        error = fail(f"{target} timed out after {timeout:g} s ({type(exc).__name__})")
        raise error from (exc if chain else None)
    except httpx.HTTPError as exc:
        error = fail(f"{target} failed: {type(exc).__name__}: {detail(str(exc))}")
        raise error from (exc if chain else None)


class HttpNotifier:
    """A notifier that POSTs to one URL: where, how long it waits, and what it may show of itself.

    A channel checks its own settings, then calls ``__init__``; it overrides :meth:`_fail` to
    scrub its secrets from error messages.
    """

    def __init__(
        self, url: str, where: str, *, timeout: float, transport: httpx.BaseTransport | None
    ) -> None:
        """POST to ``url``, named ``where`` in logs and errors; ``transport`` replaces httpx's."""
        self._url = url
        self._where = where
        self._timeout = timeout
        self._transport = transport

    @property
    def destination(self) -> str:
        """Where this notifier posts, safe to log."""
        return self._where

    def __repr__(self) -> str:
        """Show the destination, never a secret."""
        return f"{type(self).__name__}({self._where!r})"

    def _fail(self, text: str) -> DeliveryError:
        """The DeliveryError for ``text`` (a channel with secrets scrubs them here)."""
        return DeliveryError(text)

    def _body(self, event: str, build: Callable[[], Any]) -> bytes:
        """``build()`` as compact JSON; DeliveryError ("cannot post this <event>") when it fails."""
        try:
            return compact_json(build())
        except (TypeError, ValueError) as exc:
            raise self._fail(f"{self._where}: cannot post this {event}: {exc}") from None

    def _post(
        self,
        content: bytes,
        headers: Mapping[str, str],
        *,
        target: str,
        chain: bool = False,
        url: str | None = None,
    ) -> httpx.Response:
        """:func:`post` to ``url`` (default: this notifier's URL), errors through :meth:`_fail`."""
        return post(
            self._url if url is None else url,
            content,
            headers,
            target=target,
            timeout=self._timeout,
            transport=self._transport,
            fail=self._fail,
            chain=chain,
        )
