"""The gate: a rules file decides allow / deny / ask for each tool call.

The file has the seed's actauth.yml shape::

    rules:
      - tool: send_email
        when: {field: intent, op: eq, value: tracking_info}
        decision: allow
    default_decision: ask

``field`` is a dot path into the args; ``op`` comes from a fixed table (no eval) that compares
JSON values (``true`` is not ``1``; ``gt``/``gte``/``lt``/``lte`` compare numbers only; ``in`` takes
a list; ``contains`` is substring for strings and element for arrays). The first rule whose tool
matches and whose condition holds wins. A condition that cannot be evaluated (missing field, wrong
type) does not hold: a malformed call never matches an allow rule, it falls through to
``default_decision`` (write rules allow-positive, default ask).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from loopengine.domain.base.errors import ConfigError
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.policy import Expiry
from loopengine.domain.rules import RuleModel, RulesFile, summary


class Decision(StrEnum):
    """What the gate says about one call."""

    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"


_MISSING = object()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1`` (as Python has it), ``1`` is ``1.0``, containers deep."""
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def _numeric(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    return lambda actual, value: _is_number(actual) and _is_number(value) and compare(actual, value)


def _in(actual: Any, value: Any) -> bool:
    return isinstance(value, list) and any(same(actual, v) for v in value)


def _contains(actual: Any, value: Any) -> bool:
    """A string contains a substring; an array contains an element; nothing else contains anything."""
    if isinstance(actual, str):
        return isinstance(value, str) and value in actual
    return isinstance(actual, list) and any(same(v, value) for v in actual)


OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": same,
    "ne": lambda actual, value: not same(actual, value),
    "gt": _numeric(operator.gt),
    "gte": _numeric(operator.ge),
    "lt": _numeric(operator.lt),
    "lte": _numeric(operator.le),
    "in": _in,
    "contains": _contains,
}


def lookup(args: Any, path: str) -> Any:
    """Resolve a dot path (``a.b.0.c``) into nested dicts/lists; ``_MISSING`` when absent."""
    cur = args
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isascii() and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return _MISSING
    return cur


@dataclass(frozen=True, slots=True)
class Condition:
    """``{field, op, value}``: holds when ``op(args[field], value)`` is true."""

    field: str
    op: str
    value: Any

    def holds(self, args: JsonDict) -> bool:
        """Evaluate; anything that cannot be compared means the condition does not hold."""
        actual = lookup(args, self.field)
        if actual is _MISSING:
            return False
        return OPS[self.op](actual, self.value)


@dataclass(frozen=True, slots=True)
class Rule:
    """One line of the rules file."""

    tool: str
    decision: Decision
    when: Condition | None = None
    reason: str | None = None
    approvers: tuple[str, ...] = ()
    expiry: Expiry | None = None

    def matches(self, tool: str, args: JsonDict) -> bool:
        """True when this rule applies to the call."""
        if self.tool not in ("*", tool):
            return False
        return self.when is None or self.when.holds(args)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gate's answer for one call, recorded once and never re-evaluated on resume."""

    decision: Decision
    reason: str
    rule: int | None = None
    approvers: tuple[str, ...] = ()
    expiry: Expiry | None = None

    def to_dict(self) -> JsonDict:
        """Plain form for storage."""
        out: JsonDict = {
            "decision": self.decision.value,
            "reason": self.reason,
            "rule": self.rule,
            "approvers": list(self.approvers),
        }
        if self.expiry is not None:
            out["pendingTtl"] = self.expiry.ttl_seconds
            out["onExpiry"] = self.expiry.on_expiry
        return out

    @staticmethod
    def from_dict(data: JsonDict) -> Verdict:
        """Parse the stored form."""
        return Verdict(
            decision=Decision(data["decision"]),
            reason=str(data["reason"]),
            rule=data.get("rule"),
            approvers=tuple(data.get("approvers") or ()),
            expiry=Expiry(float(data["pendingTtl"]), data.get("onExpiry", "unknown"))
            if data.get("pendingTtl")
            else None,
        )


@dataclass(frozen=True, slots=True)
class RuleSet:
    """An ordered list of rules plus the decision when none matches."""

    rules: tuple[Rule, ...] = ()
    default_decision: Decision = Decision.ASK
    source: JsonDict = field(default_factory=dict, compare=False)

    def evaluate(self, tool: str, args: Any) -> Verdict:
        """First matching rule wins; a non-dict ``args`` can only reach the default."""
        if isinstance(args, dict):
            for index, rule in enumerate(self.rules):
                if rule.matches(tool, args):
                    why = rule.reason or _describe(rule)
                    return Verdict(rule.decision, why, index, rule.approvers, rule.expiry)
        return Verdict(
            self.default_decision,
            f"no rule matched {tool}; default_decision is {self.default_decision.value}",
        )

    @staticmethod
    def from_dict(data: Any) -> RuleSet:
        """Parse and validate the rules-file shape; ``ConfigError`` names every problem."""
        try:
            model = RulesFile.model_validate({} if data is None else data)
        except ValidationError as exc:
            raise ConfigError(f"rules file: {summary(exc, RulesFile)}") from None
        return RuleSet.from_model(model, data if isinstance(data, dict) else {})

    @staticmethod
    def from_model(model: RulesFile, source: JsonDict) -> RuleSet:
        """The rule set of a validated rules file; ``source`` is the file as written (snapshotted)."""
        rules = tuple(_rule(r) for r in model.rules or ())
        return RuleSet(rules=rules, default_decision=Decision(model.default_decision), source=source)


def _rule(raw: RuleModel) -> Rule:
    when = raw.when
    return Rule(
        tool=raw.tool,
        decision=Decision(raw.decision),
        when=Condition(when.field, when.op, when.value) if when is not None else None,
        reason=raw.reason,
        approvers=tuple(raw.approvers or ()),
        expiry=Expiry(raw.pending_ttl, raw.on_expiry or "unknown") if raw.pending_ttl is not None else None,
    )


def _describe(rule: Rule) -> str:
    if rule.when is None:
        return f"rule: {rule.tool} -> {rule.decision.value}"
    w = rule.when
    return f"rule: {rule.tool} when {w.field} {w.op} {w.value!r} -> {rule.decision.value}"
