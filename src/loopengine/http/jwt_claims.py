"""A JWT authorizer's claims as a principal: who, in which tenants, with which groups, or refused.

API Gateway's JWT authorizer has checked the token (signature, issuer, audience, expiry) before the
request reaches the function; its claims arrive in ``requestContext.authorizer.jwt.claims``, every
value a string (a list claim such as ``cognito:groups`` as ``"[a b]"``). What this module makes of
them, from these settings (read per request through :func:`loopengine.http.secrets.environ`):

* ``LOOPENGINE_JWT_IDENTITY``: who the token's holder is. Unset (or ``jwt``): ``jwt:<iss>/<sub>``
  (the issuer without trailing ``/``), an identity no other source can have. ``user``: ``user:<sub>``;
  ``user:<claim>``: ``user:<value of that claim>`` (e.g. ``user:email``, ``user:cognito:username``),
  so rules' ``approvers`` can name token holders as users. That mapping is the operator's choice:
  such a user is then the same identity as an HTTP Basic user of that name;
* ``LOOPENGINE_JWT_TENANT_CLAIM`` (default ``tenant``; Cognito: ``custom:tenant``): the claim
  naming the caller's tenants (one, or a list). A token without it is refused (403) unless
  ``LOOPENGINE_JWT_DEFAULT_TENANT`` names the tenant such tokens act in (``-`` names the default
  tenant ``""``). A claim naming something that is not a tenant id is refused too;
* ``LOOPENGINE_JWT_GROUPS_CLAIM`` (default ``cognito:groups``): the caller's groups, each
  ``group:<name>``;
* ``LOOPENGINE_JWT_SCOPES`` (optional; space or comma separated): scopes the token must carry,
  every one of them, in its ``scope`` claim (OAuth 2.0: space separated), its ``scp`` claim, or the
  authorizer's ``scopes``; a token without one is refused (403).

Values are never parsed for a kind (:func:`loopengine.domain.principals.typed`): a ``sub`` of
``group:refund-managers`` is ``jwt:<iss>/group:refund-managers`` (or ``user:group:…``), never the
group. A claim that is not printable text of at most :data:`MAX_CLAIM_CHARS` is refused (401).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loopengine.domain.base import ids
from loopengine.domain.base.errors import ConfigError
from loopengine.domain.principals import Principal, typed
from loopengine.http.web import HttpError

IDENTITY_ENV = "LOOPENGINE_JWT_IDENTITY"
TENANT_CLAIM_ENV = "LOOPENGINE_JWT_TENANT_CLAIM"
GROUPS_CLAIM_ENV = "LOOPENGINE_JWT_GROUPS_CLAIM"
DEFAULT_TENANT_ENV = "LOOPENGINE_JWT_DEFAULT_TENANT"
SCOPES_ENV = "LOOPENGINE_JWT_SCOPES"
DEFAULT_TENANT_CLAIM = "tenant"
DEFAULT_GROUPS_CLAIM = "cognito:groups"
THE_DEFAULT_TENANT = "-"
"""How ``LOOPENGINE_JWT_DEFAULT_TENANT`` names the default tenant ``""`` (an empty value is unset)."""
MAX_CLAIM_CHARS = 1024
CHANNEL = "api"


@dataclass(frozen=True, slots=True)
class JwtSettings:
    """How a deployment reads its tokens (see the module docstring)."""

    identity_claim: str | None = None
    """``None``: ``jwt:<iss>/<sub>``; else the claim whose value is the ``user:`` name."""
    tenant_claim: str = DEFAULT_TENANT_CLAIM
    groups_claim: str = DEFAULT_GROUPS_CLAIM
    default_tenant: str | None = None
    scopes: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JwtSettings:
        """The settings of ``env``; ConfigError for a value that cannot be meant."""
        mode = (env.get(IDENTITY_ENV) or "jwt").strip()
        kind, _, claim = mode.partition(":")
        if mode == "jwt":
            identity_claim = None
        elif kind == "user":
            identity_claim = claim or "sub"
        else:
            raise ConfigError(f"{IDENTITY_ENV} must be jwt, user or user:<claim>, not {mode!r}")
        default = (env.get(DEFAULT_TENANT_ENV) or "").strip() or None
        if default == THE_DEFAULT_TENANT:
            default = ""
        elif default is not None and not ids.is_tenant(default):
            raise ConfigError(f"{DEFAULT_TENANT_ENV} is not a tenant id (use - for the default tenant)")
        return cls(
            identity_claim=identity_claim,
            tenant_claim=(env.get(TENANT_CLAIM_ENV) or "").strip() or DEFAULT_TENANT_CLAIM,
            groups_claim=(env.get(GROUPS_CLAIM_ENV) or "").strip() or DEFAULT_GROUPS_CLAIM,
            default_tenant=default,
            scopes=frozenset(words(env.get(SCOPES_ENV) or "")),
        )


def words(value: Any) -> list[str]:
    """A claim that is a list, or (as API Gateway passes lists) a string like ``[a b]`` / ``a,b``."""
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str) and v]
    if isinstance(value, str):
        return [v for v in value.strip().removeprefix("[").removesuffix("]").replace(",", " ").split() if v]
    return []


def _text(claims: Mapping[str, Any], name: str) -> str:
    """The claim ``name`` as printable text; 401 when it is missing or is not."""
    value = claims.get(name)
    if not isinstance(value, str) or not value.strip():
        raise HttpError(401, "unauthorized", f"the token has no {name} claim")
    if len(value) > MAX_CLAIM_CHARS or not value.isprintable():
        raise HttpError(401, "unauthorized", f"the token's {name} claim is not printable text")
    return value


def principal_from_claims(claims: Mapping[str, Any], scopes: Any, settings: JwtSettings) -> Principal:
    """The principal of a verified token's ``claims`` (and the authorizer's ``scopes``), or refused."""
    subject = _text(claims, "sub")
    if settings.identity_claim is None:
        issuer = _text(claims, "iss").rstrip("/")
        who = typed("jwt", f"{issuer}/{subject}")
    else:
        who = typed("user", _text(claims, settings.identity_claim))
    missing = settings.scopes - {*words(claims.get("scope")), *words(claims.get("scp")), *words(scopes)}
    if missing:
        raise HttpError(403, "forbidden", f"the token lacks the scope(s) {' '.join(sorted(missing))}")
    groups = tuple(typed("group", g) for g in words(claims.get(settings.groups_claim)))
    return Principal(who, CHANNEL, groups, _tenants(claims, settings), kind="jwt")


def _tenants(claims: Mapping[str, Any], settings: JwtSettings) -> frozenset[str]:
    """The tenants the token names (all valid tenant ids, else 403), or the default tenant."""
    raw = claims.get(settings.tenant_claim)
    if raw is not None and not isinstance(raw, str | list):
        raise HttpError(403, "forbidden", f"the token's {settings.tenant_claim} claim names no valid tenant")
    named = words(raw)
    if isinstance(raw, list) and len(named) != len(raw):
        raise HttpError(403, "forbidden", f"the token's {settings.tenant_claim} claim names no valid tenant")
    if not named:
        if settings.default_tenant is None:
            raise HttpError(
                403,
                "forbidden",
                f"the token has no {settings.tenant_claim} claim and no default tenant is set",
            )
        return frozenset({settings.default_tenant})
    if not all(ids.is_tenant(t) for t in named):
        raise HttpError(403, "forbidden", f"the token's {settings.tenant_claim} claim names no valid tenant")
    return frozenset(named)
