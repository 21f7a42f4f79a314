"""Who is calling: one middleware in front of every route, deny by default.

Public routes are an explicit list (:data:`PUBLIC`): ``/health``, and the magic-link and Slack /
Lark routes, each authenticated by its own signature or token. Every other request needs a
principal (:class:`~loopengine.domain.principals.Principal`), else 401. Sources, first match wins:

- the JWT authorizer's claims (AWS): ``sub`` -> ``user:<sub>``; tenants from the claim named by
  ``LOOPENGINE_JWT_TENANT_CLAIM`` (default ``tenant``; none -> the default tenant only); groups
  from ``LOOPENGINE_JWT_GROUPS_CLAIM`` (default ``cognito:groups``) -> ``group:<name>``;
- HTTP Basic ``LOOPENGINE_ADMIN_AUTH`` (``user:password``): the operator, every tenant;
- HTTP Basic users of ``LOOPENGINE_USERS`` (JSON list of ``{"user", "password", "tenants",
  "groups"}``), each scoped to their tenants;
- with none configured, a local server started with anonymous access (``loopengine dev``) lets
  calls through as an anonymous operator.

A request may name the channel it decides through in ``X-Loopengine-Channel`` (only ``live``, the
inline decisions of ``loopengine chat``); the audit trail records it with each decision.

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

from loopengine.domain.errors import ConfigError
from loopengine.domain.principals import OPERATOR, Principal
from loopengine.http import secrets
from loopengine.http.web import HttpError

PUBLIC_EXACT = ("/health",)
PUBLIC_PREFIXES = ("/magic/", "/integrations/")
PUBLIC = (*PUBLIC_EXACT, *(p + "*" for p in PUBLIC_PREFIXES))
"""Routes that take no Basic or JWT credentials (each checks its own signature or token)."""
CHANNEL_HEADER = "x-loopengine-channel"
CHANNELS = ("live",)
"""Channels a caller may name for its decisions (the principal's own channel otherwise)."""


def is_public(path: str) -> bool:
    """Whether ``path`` is on the public list."""
    return path in PUBLIC_EXACT or any(path.startswith(p) for p in PUBLIC_PREFIXES)


def middleware(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response[str]:
    """Resolve the caller's principal before any non-public route runs (401 without one)."""
    if not is_public(app.current_event.path):
        found = with_channel(principal(app.current_event), app.current_event)
        app.append_context(principal=found)  # type: ignore[no-untyped-call]
    response: Response[str] = next_middleware(app)
    return response


def with_channel(who: Principal, event: APIGatewayProxyEventV2) -> Principal:
    """``who`` deciding through the channel its request names in ``X-Loopengine-Channel``.

    Only :data:`CHANNELS` may be named (400 otherwise); the channel is what the audit trail
    records with each decision (``live``: decided inline in ``loopengine chat``).
    """
    named = (event.headers or {}).get(CHANNEL_HEADER)
    if named is None:
        return who
    if named not in CHANNELS:
        raise HttpError(400, "invalid_input", f"{CHANNEL_HEADER} must be one of: {', '.join(CHANNELS)}")
    return dataclasses.replace(who, channel=named)


def current(app: BaseRouter) -> Principal:
    """The principal the middleware resolved for this request."""
    found = app.context.get("principal")
    if not isinstance(found, Principal):  # a route outside the middleware's reach: deny
        raise HttpError(401, "unauthorized", "credentials required")
    return found


def principal(event: APIGatewayProxyEventV2, env: Mapping[str, str] | None = None) -> Principal:
    """The principal of one request; 401 when it carries none that is valid."""
    env = secrets.environ() if env is None else env
    claims = _jwt_claims(event)
    if claims.get("sub"):
        return _from_claims(claims, env)
    header = (event.headers or {}).get("authorization") or ""
    admin = env.get("LOOPENGINE_ADMIN_AUTH") or ""
    users = _users(env.get("LOOPENGINE_USERS") or "")
    if not admin and not users:
        if env.get("LOOPENGINE_ALLOW_ANONYMOUS") == "1":
            return Principal("anonymous", "api", kind=OPERATOR)
        raise HttpError(401, "unauthorized", "credentials required")
    given = _basic(header)
    if given is None:
        raise HttpError(401, "unauthorized", "missing or wrong credentials")
    found: Principal | None = None
    if admin and hmac.compare_digest(given, admin.encode()):
        found = Principal(admin.split(":", 1)[0], "api", kind=OPERATOR)
    for secret, user in users:  # every one compared: the time does not tell which names exist
        if hmac.compare_digest(given, secret) and found is None:
            found = user
    if found is None:
        raise HttpError(401, "unauthorized", "missing or wrong credentials")
    return found


def _from_claims(claims: dict[str, Any], env: Mapping[str, str]) -> Principal:
    tenant_claim = env.get("LOOPENGINE_JWT_TENANT_CLAIM") or "tenant"
    groups_claim = env.get("LOOPENGINE_JWT_GROUPS_CLAIM") or "cognito:groups"
    tenants = _claim_list(claims.get(tenant_claim)) or [""]
    groups = tuple(f"group:{g}" for g in _claim_list(claims.get(groups_claim)))
    return Principal(f"user:{claims['sub']}", "api-jwt", groups, frozenset(tenants), kind="jwt")


def _claim_list(value: Any) -> list[str]:
    """A claim that is a list, or (as API Gateway passes lists) a string like ``[a b]`` / ``a,b``."""
    if isinstance(value, list):
        return [str(v) for v in value if str(v)]
    if isinstance(value, str):
        return [v for v in value.strip("[]").replace(",", " ").split() if v]
    return []


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
            named = [str(g) for g in entry.get("groups") or []]
            groups = tuple(g if g.startswith("group:") else f"group:{g}" for g in named)
            out.append((f"{user}:{password}".encode(), Principal(user, "api", groups, tenants, kind="user")))
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


def _jwt_claims(event: APIGatewayProxyEventV2) -> dict[str, Any]:
    context: dict[str, Any] = event.raw_event.get("requestContext") or {}
    authorizer = context.get("authorizer") or {}
    jwt = authorizer.get("jwt") or {}
    claims = jwt.get("claims") or {}
    return claims if isinstance(claims, dict) else {}
