"""Who is asking: principals, typed identities and tenants (DESIGN.md "Principals and tenants").

Identities are typed strings: ``user:<name>``, ``group:<name>``, ``slack:<user id>``,
``lark:<open_id>``, ``email:<address>``. A bare name in a rule's ``approvers`` means ``user:``.
Matching is exact on the typed form, so a JWT whose ``sub`` is ``refund-managers`` is
``user:refund-managers`` and never passes the approver entry ``group:refund-managers``.

A principal is ``{id, kind, tenants, groups}``: ``tenants`` ``None`` means every tenant (the
operator); a magic-link recipient is further scoped to the one pending item it was sent
(``pending_id``). Every turn, session, checkpoint and pending item belongs to exactly one tenant
(the default tenant is ``""``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from loopengine.domain.decisions import DecidedBy

KINDS = ("user", "group", "slack", "lark", "email")
OPERATOR = "operator"


def identity(value: str) -> str:
    """The typed form of an identity: ``alice`` -> ``user:alice``; typed ones stay as they are."""
    kind, sep, rest = value.partition(":")
    if sep and kind in KINDS and rest:
        return value
    return f"user:{value}"


def identities(values: Iterable[str]) -> frozenset[str]:
    """The typed forms of ``values``."""
    return frozenset(identity(v) for v in values)


@dataclass(frozen=True)
class Principal:
    """An authenticated caller (or decider): who, through which channel, in which tenants.

    ``identity`` is kept as given (it is what the audit trail records as ``decidedBy``); matching
    uses :meth:`identities`, the typed forms of it and of ``groups``.
    """

    identity: str
    channel: str = "api"
    groups: tuple[str, ...] = ()
    tenants: frozenset[str] | None = None
    kind: str = "user"
    pending_id: str | None = None

    @property
    def id(self) -> str:
        """The typed identity (an untyped ``identity`` takes the principal's kind, else ``user:``)."""
        kind, sep, rest = self.identity.partition(":")
        if sep and kind in KINDS and rest:
            return self.identity
        return f"{self.kind if self.kind in KINDS else 'user'}:{self.identity}"

    @property
    def operator(self) -> bool:
        """The operator acts in every tenant and may cancel anything."""
        return self.kind == OPERATOR

    def identities(self) -> frozenset[str]:
        """Every typed identity this principal holds (itself and its groups)."""
        return frozenset({self.id, *(g if g.startswith("group:") else f"group:{g}" for g in self.groups)})

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
        """Who this decider is in the decision log and the audit trail."""
        return DecidedBy(self.identity, self.channel)

    def describe(self) -> dict[str, Any]:
        """``{id, kind, tenants, groups}`` as DESIGN.md names them."""
        tenants = None if self.tenants is None else sorted(self.tenants)
        groups = sorted(self.identities() - {self.id})
        return {"id": self.id, "kind": self.kind, "tenants": tenants, "groups": groups}
