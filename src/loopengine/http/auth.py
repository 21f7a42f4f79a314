"""Who is calling: one middleware in front of every route, deny by default.

Public routes are an explicit list (:data:`PUBLIC`): ``/health``, and the magic-link and Slack /
Lark routes, each authenticated by its own signature or token. Every other request needs a
principal (:class:`~loopengine.domain.principals.Principal`), else 401. Sources, first match wins:

- the JWT authorizer's claims (AWS), read by :mod:`loopengine.http.jwt_claims`: ``jwt:<iss>/<sub>``
  (or, where the deployment maps tokens to users, ``user:<claim>``); tenants from a claim (a token
  without it is refused unless a default tenant is set); required scopes; groups;
- HTTP Basic ``LOOPENGINE_ADMIN_AUTH`` (``user:password``): the operator ``user:<user>``, every
  tenant;
- HTTP Basic users of ``LOOPENGINE_USERS`` (JSON list of ``{"user", "password", "tenants",
  "groups"}``): ``user:<user>``, each scoped to their tenants (a user named like the operator is a
  configuration error: one name, one identity);
- with none configured, a local server started with anonymous access (``loopengine dev``) lets
  calls through as an anonymous operator.

Identities are built from their source's kind and the value as text
(:func:`~loopengine.domain.principals.typed`), never parsed out of it.

**The channel** a decision is recorded with is the server's: ``inbox`` for the inbox's routes,
``api`` for the rest. A request may add a label for itself in ``X-Loopengine-Channel`` (``live``, the
inline decisions of ``loopengine chat``, or ``chat``, those of the conversation page; anything else is
400); the audit trail keeps it beside the channel as ``declaredChannel`` and nothing trusts it.

Credentials are read per request through :func:`loopengine.http.secrets.environ` (in AWS from Secrets
Manager, cached). Passwords are compared in constant time, and every configured user is compared,
so the time taken does not say which user names exist.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import hmac
import json
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from loopengine.domain.base.errors import ConfigError
from loopengine.domain.principals import OPERATOR, Principal, typed
from loopengine.http import jwt_claims, secrets
from loopengine.http.web import HttpError

PUBLIC_EXACT = ("/health",)
PUBLIC_PREFIXES = ("/magic/", "/integrations/")
PUBLIC = (*PUBLIC_EXACT, *(p + "*" for p in PUBLIC_PREFIXES))
"""Routes that take no Basic or JWT credentials (each checks its own signature or token)."""
BASIC_CHALLENGE = 'Basic realm="loopengine", charset="UTF-8"'
"""What a 401 for a browser page carries (:func:`challenge`), so the browser asks for a login."""
CHANNEL_HEADER = "x-loopengine-channel"
CHANNELS = ("live", "chat")
"""Labels a caller may declare in ``X-Loopengine-Channel`` (recorded as ``declaredChannel``): ``live``
(``loopengine chat``), ``chat`` (the conversation page, ``GET /chat/{agent}``)."""
API, INBOX = "api", "inbox"
"""The channels the server records for its authenticated routes."""


def challenge(response: Response[Any], ask: bool) -> Response[Any]:
    """``response`` with the Basic challenge when it is a 401 and ``ask`` (it is for a browser page)."""
    if response.status_code == 401 and ask:
        response.headers["WWW-Authenticate"] = BASIC_CHALLENGE
    return response


def is_public(path: str) -> bool:
    """Whether ``path`` is on the public list."""
    return path in PUBLIC_EXACT or any(path.startswith(p) for p in PUBLIC_PREFIXES)


def route_channel(path: str) -> str:
    """The channel of a decision made through ``path``: ``inbox`` for the inbox's routes, else ``api``."""
    return INBOX if path == "/inbox" or path.startswith("/inbox/") else API


def middleware(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response[str]:
    """Resolve the caller's principal before any non-public route runs (401 without one)."""
    if not is_public(app.current_event.path):
        found = with_channel(principal(app.current_event), app.current_event)
        app.append_context(principal=found)  # type: ignore[no-untyped-call]
    response: Response[str] = next_middleware(app)
    return response


def with_channel(who: Principal, event: APIGatewayProxyEventV2) -> Principal:
    """``who`` deciding through the channel of the request's route, with the label it declared.

    The channel is the server's (:func:`route_channel`). ``X-Loopengine-Channel`` may declare one
    of :data:`CHANNELS` (400 otherwise), recorded beside the channel, never instead of it.
    """
    declared = (event.headers or {}).get(CHANNEL_HEADER)
    if declared is not None and declared not in CHANNELS:
        raise HttpError(400, "invalid_input", f"{CHANNEL_HEADER} must be one of: {', '.join(CHANNELS)}")
    return dataclasses.replace(who, channel=route_channel(event.path), declared_channel=declared)


def current(app: BaseRouter) -> Principal:
    """The principal the middleware resolved for this request."""
    found = app.context.get("principal")
    if not isinstance(found, Principal):  # a route outside the middleware's reach: deny
        raise HttpError(401, "unauthorized", "credentials required")
    return found


def principal(event: APIGatewayProxyEventV2, env: Mapping[str, str] | None = None) -> Principal:
    """The principal of one request; 401 when it carries none that is valid (403: a token refused)."""
    env = secrets.environ() if env is None else env
    token = _jwt(event)
    if token is not None:
        claims, scopes = token
        return jwt_claims.principal_from_claims(claims, scopes, jwt_claims.JwtSettings.from_env(env))
    header = (event.headers or {}).get("authorization") or ""
    admin = env.get("LOOPENGINE_ADMIN_AUTH") or ""
    users = _users(env.get("LOOPENGINE_USERS") or "")
    if not admin and not users:
        if env.get("LOOPENGINE_ALLOW_ANONYMOUS") == "1":
            return Principal(typed("user", "anonymous"), API, kind=OPERATOR)
        raise HttpError(401, "unauthorized", "credentials required")
    operator = _operator(admin, users)
    given = _basic(header)
    if given is None:
        raise HttpError(401, "unauthorized", "missing or wrong credentials")
    found: Principal | None = None
    if operator is not None and hmac.compare_digest(given, admin.encode()):
        found = operator
    for secret, user in users:  # every one compared: the time does not tell which names exist
        if hmac.compare_digest(given, secret) and found is None:
            found = user
    if found is None:
        raise HttpError(401, "unauthorized", "missing or wrong credentials")
    return found


def _operator(admin: str, users: tuple[tuple[bytes, Principal], ...]) -> Principal | None:
    """The operator of ``LOOPENGINE_ADMIN_AUTH`` (None when unset); ConfigError for a name clash."""
    if not admin:
        return None
    name = admin.split(":", 1)[0]
    if not name:
        raise ConfigError("LOOPENGINE_ADMIN_AUTH must be user:password with a non-empty user")
    operator = Principal(typed("user", name), API, kind=OPERATOR)
    if any(user.id == operator.id for _, user in users):
        raise ConfigError("LOOPENGINE_USERS names the operator's user; each name must be one principal")
    return operator


@functools.lru_cache(maxsize=4)
def _users(raw: str) -> tuple[tuple[bytes, Principal], ...]:
    """``LOOPENGINE_USERS`` parsed once per value: (``user:password`` bytes, principal) pairs."""
    if not raw:
        return ()
    try:
        data = json.loads(raw)
        if not isinstance(data, list):
            raise ValueError("not a list")
        out = []
        for entry in data:
            user, password = str(entry["user"]), str(entry["password"])
            if not user or ":" in user or not password:
                raise ValueError("user and password must be non-empty; user without ':'")
            tenants = frozenset(str(t) for t in entry.get("tenants") or [""])
            groups = tuple(str(g) for g in entry.get("groups") or [])
            who = Principal(typed("user", user), API, groups, tenants, kind="user")
            out.append((f"{user}:{password}".encode(), who))
        return tuple(out)
    except (ValueError, KeyError, TypeError) as exc:
        shape = "a JSON list of {user, password, tenants, groups}"
        raise ConfigError(f"LOOPENGINE_USERS is not {shape}: {exc}") from None


def _basic(header: str) -> bytes | None:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or not token:
        return None
    try:
        return base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None


def _jwt(event: APIGatewayProxyEventV2) -> tuple[dict[str, Any], Any] | None:
    """The JWT authorizer's ``(claims, scopes)``, or None when the request came without a token."""
    context: dict[str, Any] = event.raw_event.get("requestContext") or {}
    authorizer = context.get("authorizer") or {}
    jwt = authorizer.get("jwt") if isinstance(authorizer, dict) else None
    if not isinstance(jwt, dict):
        return None
    claims = jwt.get("claims")
    if not isinstance(claims, dict) or not claims:
        return None
    return claims, jwt.get("scopes")
