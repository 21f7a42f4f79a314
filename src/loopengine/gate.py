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

from loopengine.errors import ConfigError
from loopengine.policy import Expiry

JsonDict = dict[str, Any]


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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
        """Parse and validate the rules-file shape; ``ConfigError`` names what is wrong."""
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError("rules file must be a mapping with 'rules' and 'default_decision'")
        rules = []
        for i, raw in enumerate(data.get("rules") or []):
            rules.append(_parse_rule(i, raw))
        default = _parse_decision(data.get("default_decision", "ask"), "default_decision")
        return RuleSet(rules=tuple(rules), default_decision=default, source=data)


def _parse_decision(value: Any, where: str) -> Decision:
    try:
        return Decision(value)
    except ValueError:
        raise ConfigError(f"{where}: decision must be allow, deny or ask, not {value!r}") from None


def _parse_rule(i: int, raw: Any) -> Rule:
    where = f"rules[{i}]"
    if not isinstance(raw, dict) or not isinstance(raw.get("tool"), str):
        raise ConfigError(f"{where}: each rule needs a 'tool' name")
    cond = None
    if raw.get("when") is not None:
        when = raw["when"]
        if not isinstance(when, dict) or not isinstance(when.get("field"), str):
            raise ConfigError(f"{where}.when: needs 'field', 'op' and 'value'")
        if when.get("op") not in OPS:
            raise ConfigError(f"{where}.when.op: {when.get('op')!r} is not one of {sorted(OPS)}")
        if "value" not in when:
            raise ConfigError(f"{where}.when: '{when['op']}' needs a value")
        if when["op"] == "in" and not isinstance(when["value"], list):
            raise ConfigError(f"{where}.when.value: 'in' needs a list of values")
        if when["op"] in ("gt", "gte", "lt", "lte") and not _is_number(when["value"]):
            raise ConfigError(f"{where}.when.value: '{when['op']}' compares numbers; give a number")
        cond = Condition(field=when["field"], op=when["op"], value=when["value"])
    approvers = raw.get("approvers") or []
    if not isinstance(approvers, list) or not all(isinstance(a, str) for a in approvers):
        raise ConfigError(f"{where}.approvers: must be a list of identities")
    return Rule(
        tool=raw["tool"],
        decision=_parse_decision(raw.get("decision"), where),
        when=cond,
        reason=raw.get("reason"),
        approvers=tuple(approvers),
        expiry=Expiry.parse(raw, where),
    )


def _describe(rule: Rule) -> str:
    if rule.when is None:
        return f"rule: {rule.tool} -> {rule.decision.value}"
    w = rule.when
    return f"rule: {rule.tool} when {w.field} {w.op} {w.value!r} -> {rule.decision.value}"
