"""The ``redis`` channel: one Redis entry per notification, for a worker to pop.

    notifier:
      channel: redis
      config:
        url_env: LOOPENGINE_REDIS_URL      # the default; redis://[user:password@]host[:port][/db] or rediss://
        key: loopengine:approvals          # the default
        mode: list                         # list (RPUSH, the default) | stream (XADD)
        maxlen: 10000                      # stream only: trim to about this many entries
        timeout: 2                         # seconds, connect and each command (default 2, at most 10)
        secret_env: LOOPENGINE_REDIS_SECRET  # required: the variable holding the signing secret
      events: [approval, question]

**The entry** is the webhook's JSON body (``{"event": ..., "eventId": ..., "pendingId": ..., ...}``,
compact; :func:`~loopengine.channels.base.notification_body`), so one receiver can read any channel,
**signed** like a webhook with the secret ``secret_env`` names (required: anyone who can write to the
key could otherwise push an entry): a list entry ends with one more member, ``"signature":
"t=...,v1=..."``, a stream entry has a ``signature`` field beside ``body``
(:mod:`loopengine.channels.redis.signed`). The consumer refuses what it cannot verify. A consumer
resolves through the normal routes
(``POST /pending-approvals/{pendingId}/resolve``, ``POST /pending-questions/{pendingId}/answer``) with
its own credentials: :mod:`loopengine.channels.redis.consume` is one, with a worked example.

**List or stream.** ``mode: list`` (the default) pushes (``RPUSH``) the body: the simplest thing a worker
can ``BLPOP``, in order, but a pop is destructive (a worker that dies mid-item loses the entry, not
the item: it stays open and listed by ``GET /pending-approvals``). ``mode: stream`` adds (``XADD``) the
fields ``event``, ``eventId``, ``body`` (the same JSON) and ``signature`` and keeps the entry until trimmed
(``maxlen``, approximate ``MAXLEN ~``): readers use consumer groups with acknowledgements, several
groups can read the same entries, and nothing is lost to a crashed worker.

**At least once.** Every send goes through the outbox (:mod:`loopengine.domain.outbox`): a Redis
that is down, refuses the password or holds another type at the key is a
:class:`~loopengine.domain.base.errors.DeliveryError`, recorded and retried with backoff by the sweep.
A send whose answer was lost may have pushed its entry, so an entry can arrive twice: both copies
carry the same ``eventId``, which is what a consumer drops duplicates by. The client itself never
retries (``retries=0``): retrying is the outbox's job, with its backoff and its audit trail.

**Never a hang.** Connecting and every command have a short ``timeout`` (2 s unless configured,
at most 10): a dead or unreachable Redis costs one failed attempt, not the request.

**The URL is a secret** when it carries a password (``redis://:password@host`` or
``redis://user:password@host``, Redis ACLs): it comes from the environment variable ``url_env``
names (``LOOPENGINE_REDIS_URL`` by default; in AWS ``LOOPENGINE_REDIS_URL_SECRET_ARN`` reads it from
Secrets Manager, :mod:`loopengine.http.secrets`). An inline ``url`` is accepted only without a
password (passwordless local use); messages name the server as ``host:port/db``, never the URL.
Query parameters are refused: redis-py would let them override the timeouts or turn off
certificate checks.

**TLS.** ``rediss://`` connects over TLS with the certificate and host name verified against the
system's CAs (``SSL_CERT_FILE`` names another bundle). Plain ``redis://`` goes only to a loopback
host unless ``plaintext: true`` says the network is trusted (a VPC whose Redis has no in-transit
encryption): approvals carry the arguments of the call and the password travels with ``AUTH``.

**Cost.** redis-py is imported on the first send, never at import or build time (routes that do
not notify pay nothing at cold start). Clients are cached per process by server and timeout, so
every agent that names the same Redis shares one connection pool, reused across invocations of a
warm Lambda.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import SplitResult, unquote, urlsplit

from loopengine.app.ports import Notification
from loopengine.authoring.agent_schema import EVENTS
from loopengine.channels import http
from loopengine.channels.base import notification_body, setting
from loopengine.channels.redis.signed import sealed
from loopengine.domain.base.clock import Clock, SystemClock
from loopengine.domain.base.errors import ConfigError, DeliveryError

if TYPE_CHECKING:
    import redis

    from loopengine.domain.base.clock import Clock

ENV_URL = "LOOPENGINE_REDIS_URL"
DEFAULT_KEY = "loopengine:approvals"
DEFAULT_TIMEOUT = 2.0
MAX_TIMEOUT = 10.0
MAX_KEY_CHARS = 512
Mode = Literal["list", "stream"]
KNOWN_KEYS = frozenset(
    {"url", "url_env", "key", "mode", "maxlen", "timeout", "plaintext", "secret", "secret_env"}
)
"""(``secret`` only to be told where it belongs: in the environment, named by ``secret_env``.)"""

_clients: dict[tuple[str, float], redis.Redis] = {}
_clients_lock = threading.Lock()


def client_for(url: str, timeout: float) -> redis.Redis:
    """The process's client for ``url`` (created on first use, then shared; thread-safe).

    Short connect and command timeouts, no client-side retries (the outbox retries), bytes in and
    out. redis-py reconnects a pooled connection the server has closed (a restart) on next use.
    """
    cache_key = (url, timeout)
    with _clients_lock:
        client = _clients.get(cache_key)
        if client is None:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            client = redis.Redis.from_url(
                url,
                socket_connect_timeout=timeout,
                socket_timeout=timeout,
                retry=Retry(NoBackoff(), 0),
            )
            _clients[cache_key] = client
        return client


def server_of(parts: SplitResult) -> str:
    """``host:port/db``: the server as messages name it (no credentials)."""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    db = unquote(parts.path).strip("/") or "0"
    return f"{host}:{parts.port or 6379}/{db}"


class RedisNotifier:
    """Pushes each notification onto a Redis list (``RPUSH``) or stream (``XADD``): a ``Notifier``."""

    def __init__(
        self,
        url: str,
        key: str = DEFAULT_KEY,
        *,
        mode: Mode = "list",
        maxlen: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        plaintext: bool = False,
        secret: str,
        clock: Clock | None = None,
    ) -> None:
        """Target ``key`` on the Redis at ``url``, signing each entry with ``secret`` at ``clock`` time.

        Raises :class:`~loopengine.domain.base.errors.ConfigError` for a URL that is not ``redis://`` or
        ``rediss://`` with a host, carries a query, or is plain ``redis://`` to a host that is not
        loopback without ``plaintext``; for an empty or overlong key, an unknown mode, ``maxlen``
        outside stream mode or not positive, a timeout outside (0, 10], and an empty secret.
        """
        parts = http.split_url(url, "notifier redis: url", ConfigError)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ConfigError("notifier redis: url must be redis://host[:port][/db] or rediss://...")
        if parts.query or parts.fragment:
            raise ConfigError(
                "notifier redis: url takes no query parameters (they could override the timeouts "
                "or certificate checks); put the database number in the path: redis://host:6379/0"
            )
        db = unquote(parts.path).strip("/")
        if db and not db.isdigit():
            raise ConfigError("notifier redis: url path must be a database number (redis://host:6379/0)")
        if parts.scheme == "redis" and parts.hostname not in http.LOOPBACK_HOSTS and not plaintext:
            raise ConfigError(
                "notifier redis: plain redis:// only to a loopback host; use rediss:// (TLS), or set "
                "plaintext: true for a trusted network whose Redis has no in-transit encryption"
            )
        if not key or len(key) > MAX_KEY_CHARS or not key.isprintable():
            raise ConfigError(f"notifier redis: key must be 1 to {MAX_KEY_CHARS} printable characters")
        if mode not in ("list", "stream"):
            raise ConfigError(f"notifier redis: mode must be list or stream, not {mode!r}")
        if maxlen is not None and (mode != "stream" or maxlen <= 0):
            raise ConfigError("notifier redis: maxlen is a positive number of entries, for mode: stream")
        if not 0 < timeout <= MAX_TIMEOUT:
            raise ConfigError(f"notifier redis: timeout must be more than 0 and at most {MAX_TIMEOUT:g}")
        if not isinstance(secret, str) or not secret:
            raise ConfigError(
                "notifier redis: secret_env must name a set environment variable holding the secret "
                "every entry is signed with (the consumer verifies it)"
            )
        self._url = url
        self._password = parts.password
        self.key, self.mode, self.maxlen, self.timeout = key, mode, maxlen, timeout
        self.server = server_of(parts)
        self.tls = parts.scheme == "rediss"
        self._secret, self._clock = secret, clock or SystemClock()

    def __repr__(self) -> str:
        """The server, key and mode (never the URL: it may hold a password)."""
        return f"RedisNotifier({self.server!r}, {self.key!r}, mode={self.mode!r})"

    def send(self, notification: Notification) -> str:
        """Push the notification; return ``"redis <mode> <key> at <server>"`` (a stream adds the entry id).

        Raises :class:`~loopengine.domain.base.errors.DeliveryError` for an unknown event, a payload that is
        not JSON, and every Redis or network failure (down, timeout, refused password, wrong type
        at the key), from the original, with no password in the message.
        """
        where = f"redis {self.mode} {self.key} at {self.server}"
        if notification.event not in EVENTS:
            raise DeliveryError(f"{where}: unknown notification event {notification.event!r}")
        body = notification_body(notification)
        signed, signature = sealed(self._secret, body, int(self._clock.now()))
        try:
            client = client_for(self._url, self.timeout)
            if self.mode == "list":
                client.rpush(self.key, signed)
                return where
            fields: dict[Any, Any] = {
                "event": notification.event,
                "eventId": str(notification.payload.get("eventId") or ""),
                "body": body,
                "signature": signature,
            }
            entry = client.xadd(self.key, fields, maxlen=self.maxlen, approximate=True)
        except Exception as exc:  # redis-py's errors (imported lazily) and socket errors alike
            message = http.scrub(f"{type(exc).__name__}: {exc}", self._password, self._secret, url=self._url)
            raise DeliveryError(f"{where}: push failed: {message}") from exc
        return f"{where} (entry {_text(entry)})"


def _text(value: Any) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)


def _check_keys(config: Mapping[str, Any]) -> None:
    for name in config:
        if name not in KNOWN_KEYS:
            hint = " (a password belongs in the URL, from url_env)" if "pass" in name.lower() else ""
            known = ", ".join(sorted(KNOWN_KEYS))
            raise ConfigError(f"notifier redis: unknown config key {name!r}{hint}; known: {known}")


def _number(config: Mapping[str, Any], name: str, *, whole: bool) -> float | None:
    value = config.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
        kind = "a whole number" if whole else "a number"
        raise ConfigError(f"notifier redis: {name} must be {kind}, not {json.dumps(value)}")
    return float(value)


def _mode(value: Any) -> Mode:
    if value == "list" or value == "stream":
        return cast(Mode, value)
    raise ConfigError(f"notifier redis: mode must be list or stream, not {json.dumps(value)}")


def from_config(config: dict[str, Any], env: Mapping[str, str], clock: Clock) -> RedisNotifier:
    """``{url | url_env, secret_env, key?, mode?, maxlen?, timeout?, plaintext?}``.

    ``url_env`` defaults to LOOPENGINE_REDIS_URL. An inline ``url`` with a password is refused: the
    password belongs in the environment; so does the signing secret (``secret_env`` must name a set
    variable).
    """
    _check_keys(config)
    inline = config.get("url")
    if isinstance(inline, str) and urlsplit(inline.strip()).password is not None:
        raise ConfigError(
            "notifier redis: the url holds a password; "
            "put the URL in the environment and name it with url_env"
        )
    url = setting(config, env, "url", ENV_URL)
    if not url:
        named = config.get("url_env") or ENV_URL
        raise ConfigError(f"notifier redis: needs url (or url_env; {named} is not set)")
    key = config.get("key", DEFAULT_KEY)
    plaintext = config.get("plaintext", False)
    if not isinstance(key, str) or not isinstance(plaintext, bool):
        raise ConfigError("notifier redis: key is a string and plaintext is true or false")
    maxlen = _number(config, "maxlen", whole=True)
    timeout = _number(config, "timeout", whole=False)
    return RedisNotifier(
        url,
        key,
        mode=_mode(config.get("mode", "list")),
        maxlen=None if maxlen is None else int(maxlen),
        timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
        plaintext=plaintext,
        secret=_signing_secret(config, env),
        clock=clock,
    )


def _signing_secret(config: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """The value of the variable ``secret_env`` names ("" when unset: the notifier refuses it)."""
    if "secret" in config:
        raise ConfigError("notifier redis: put secret in the environment and name it with secret_env")
    named = config.get("secret_env")
    return env.get(named, "") if isinstance(named, str) else ""
