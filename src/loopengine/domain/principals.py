"""Who is asking: principals, typed identities and tenants (DESIGN.md "Principals and tenants").

Identities are typed strings ``<kind>:<value>``: ``user:<name>``, ``group:<name>``, ``slack:<user
id>``, ``lark:<open_id>``, ``email:<address>`` and ``jwt:<issuer>/<sub>`` (a token's subject,
qualified by who issued it). Matching is exact on the typed form.

**Where a kind comes from.** An identity a caller presents is built with :func:`typed`, which takes
the kind from the *source* (the Slack route, the magic link, the JWT authorizer) and the value as
plain text: the value is never parsed, so a Slack user id, a Lark open_id, a magic-link recipient
or a JWT ``sub`` written ``group:refund-managers`` becomes ``slack:group:refund-managers`` (or
``email:…``, ``user:…``, ``jwt:…``) and never that group. Only trusted configuration is parsed:
a rule's ``approvers`` entry (:func:`identity`; a bare name means ``user:``).

A principal is ``{id, kind, tenants, groups}``. ``kind`` says how it was authenticated
(``operator``, ``user`` for an HTTP Basic user, ``jwt``, ``slack``, ``lark``, ``email``), and it
bounds the identity types the principal may carry (:data:`IDENTITY_KINDS`): a ``slack``
principal is always ``slack:…``, a ``jwt`` one ``jwt:…`` or, where the deployment maps tokens to
users, ``user:…``. ``tenants`` ``None`` means every tenant (the operator, and the one-item
deciders below); a magic-link recipient, a Slack or a Lark clicker is further scoped to the one
pending item it decides (``pending_id``). Every turn, session, checkpoint and pending item belongs
to exactly one tenant (the default tenant is ``""``).

``decidedBy`` in the audit trail is the principal's typed id, whatever the channel; the channel is
the server's word for the route and credential (``api``, ``inbox``, ``slack``, ``lark``,
``magic-link``, ...), and a label a client declared for itself is kept beside it
(``declaredChannel``), never instead of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from loopengine.domain.base.errors import Forbidden
from loopengine.domain.decisions import DecidedBy

KINDS = ("user", "group", "slack", "lark", "email", "jwt")
"""The identity kinds (the part before the first ``:``)."""
OPERATOR = "operator"

IDENTITY_KINDS: dict[str, tuple[str, ...]] = {
    OPERATOR: ("user",),
    "user": ("user",),
    "jwt": ("jwt", "user"),
    "slack": ("slack",),
    "lark": ("lark",),
    "email": ("email",),
}
"""For each principal kind, the identity kinds it may carry (the first is what a plain name gets)."""


def typed(kind: str, value: str) -> str:
    """The identity of ``kind`` named ``value``: ``"<kind>:<value>"``, whatever ``value`` looks like.

    ``value`` is never parsed: ``typed("slack", "group:x") == "slack:group:x"``. ValueError for an
    unknown kind or an empty value.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown identity kind {kind!r}")
    if not isinstance(value, str) or not value:
        raise ValueError("an identity needs a non-empty value")
    return f"{kind}:{value}"


def identity(value: str) -> str:
    """A rule's approver entry in its typed form: ``alice`` -> ``user:alice``; typed ones stay.

    For trusted configuration only (``rules.yaml``): this reads the kind out of the text. What a
    caller presents is built with :func:`typed` instead.
    """
    kind, sep, rest = value.partition(":")
    if sep and kind in KINDS and rest:
        return value
    return f"user:{value}"


def identities(values: Iterable[str]) -> frozenset[str]:
    """The typed forms of ``values`` (approver entries)."""
    return frozenset(identity(v) for v in values)


def _own(kind: str, given: str) -> str:
    """``given`` typed for a principal of ``kind``.

    Kept when its kind is one that principal may carry, else wrapped whole (``group:x`` for a
    ``slack`` principal is ``slack:group:x``).
    """
    allowed = IDENTITY_KINDS.get(kind, ("user",))
    prefix, sep, rest = given.partition(":")
    if sep and rest and prefix in allowed:
        return given
    return f"{allowed[0]}:{given}"


def _group(name: str) -> str:
    return name if name.startswith("group:") else f"group:{name}"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller (or decider): who, through which channel, in which tenants.

    ``identity`` is the typed id. Build it with :func:`typed`; a plain string is typed by the
    principal's ``kind`` (``Principal("alice")`` is ``user:alice``; ``Principal("U1",
    kind="slack")`` is ``slack:U1``), and a prefix of a kind this principal may not carry is kept
    as part of the value. ``groups`` are ``group:`` identities (a plain name gets the prefix).
    ``channel`` is the server's word for where the request came in; ``declared_channel`` a label
    the client gave itself (recorded for the audit, trusted for nothing).
    """

    identity: str
    channel: str = "api"
    groups: tuple[str, ...] = ()
    tenants: frozenset[str] | None = None
    kind: str = "user"
    pending_id: str | None = None
    declared_channel: str | None = None

    def __post_init__(self) -> None:
        """Type the identity and the groups (see the class docstring)."""
        if not isinstance(self.identity, str) or not self.identity:
            raise ValueError("a principal needs an identity")
        object.__setattr__(self, "identity", _own(self.kind, self.identity))
        object.__setattr__(self, "groups", tuple(_group(g) for g in self.groups))

    @property
    def id(self) -> str:
        """The typed identity (what ``decidedBy`` records and approvers match)."""
        return self.identity

    @property
    def operator(self) -> bool:
        """The operator acts in every tenant and may cancel anything."""
        return self.kind == OPERATOR

    def identities(self) -> frozenset[str]:
        """Every typed identity this principal holds (itself and its groups)."""
        return frozenset({self.identity, *self.groups})

    def sees(self, tenant: str) -> bool:
        """Whether records of ``tenant`` exist for this principal at all."""
        return self.tenants is None or tenant in self.tenants

    def sees_item(self, tenant: str, pending_id: str) -> bool:
        """Whether this principal may see (and try to decide) one pending item."""
        return self.sees(tenant) and (self.pending_id is None or self.pending_id == pending_id)

    def may_approve(self, approvers: Iterable[str]) -> bool:
        """Whether this principal satisfies a rule's ``approvers`` (anyone, when there are none)."""
        wanted = identities(approvers)
        return not wanted or bool(wanted & self.identities())

    def decided_by(self) -> DecidedBy:
        """Who this decider is in the decision log and the audit trail: the typed id, the channel."""
        return DecidedBy(self.identity, self.channel, self.declared_channel)

    def describe(self) -> dict[str, Any]:
        """``{id, kind, tenants, groups}`` as DESIGN.md names them."""
        tenants = None if self.tenants is None else sorted(self.tenants)
        return {"id": self.id, "kind": self.kind, "tenants": tenants, "groups": sorted(set(self.groups))}


def tenants_to_list(who: Principal | None, named: str | None, verb: str = "read") -> list[str]:
    """The tenants a listing covers: the one ``named``, else every tenant of ``who``.

    ``named`` outside ``who``'s scope is Forbidden; the operator (in every tenant) names one, else
    the default tenant ``""`` is listed.
    """
    if named is not None and who is not None and not who.sees(named):
        raise Forbidden(f"{who.id} may not {verb} tenant {named!r}")
    if named is not None:
        return [named]
    if who is None or who.tenants is None:
        return [""]
    return sorted(who.tenants)
