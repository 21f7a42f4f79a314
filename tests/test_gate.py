"""The gate: a fixed op table over dot paths, first match wins, and it fails closed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopengine.domain.base.errors import ConfigError
from loopengine.domain.gate import Decision, RuleSet

ARGS: dict[str, Any] = {
    "amount": 150,
    "price": 9.5,
    "intent": "refund",
    "body": "please refund my order",
    "tags": ["vip", "eu"],
    "customer": {"email": "a@example.com", "tier": {"level": 3}},
    "items": [{"sku": "LAMP-01", "qty": 2}, {"sku": "MUG-02", "qty": 1}],
    "flag": True,
    "nothing": None,
}


def allow_when(field: str, op: str, value: Any, tool: str = "t") -> RuleSet:
    """Only one allow rule with a condition; anything else asks."""
    rule = {"tool": tool, "when": {"field": field, "op": op, "value": value}, "decision": "allow"}
    return RuleSet.from_dict({"rules": [rule], "default_decision": "ask"})


def decides(rules: RuleSet, args: Any, tool: str = "t") -> Decision:
    return rules.evaluate(tool, args).decision


@pytest.mark.parametrize(
    ("field", "op", "value", "holds"),
    [
        ("intent", "eq", "refund", True),
        ("intent", "eq", "tracking_info", False),
        ("intent", "ne", "tracking_info", True),
        ("intent", "ne", "refund", False),
        ("amount", "gt", 100, True),
        ("amount", "gt", 150, False),
        ("amount", "gte", 150, True),
        ("amount", "gte", 150.5, False),
        ("amount", "lt", 200, True),
        ("amount", "lt", 150, False),
        ("amount", "lte", 150, True),
        ("amount", "lte", 149.99, False),
        ("price", "lt", 10, True),
        ("intent", "in", ["refund", "other"], True),
        ("intent", "in", ["tracking_info"], False),
        ("body", "contains", "refund", True),
        ("body", "contains", "cancel", False),
        ("tags", "contains", "vip", True),
        ("tags", "contains", "us", False),
        # dot paths: nested objects and list indexes
        ("customer.email", "eq", "a@example.com", True),
        ("customer.tier.level", "gte", 3, True),
        ("customer.tier.level", "gt", 3, False),
        ("items.0.sku", "eq", "LAMP-01", True),
        ("items.1.qty", "lt", 2, True),
        ("items.1.sku", "eq", "LAMP-01", False),
        ("tags.1", "eq", "eu", True),
        ("flag", "eq", True, True),
        ("nothing", "eq", None, True),
    ],
)
def test_every_op_over_dot_paths(field: str, op: str, value: Any, holds: bool) -> None:
    rules = allow_when(field, op, value)
    assert decides(rules, ARGS) is (Decision.ALLOW if holds else Decision.ASK)


@pytest.mark.parametrize(
    ("field", "op", "value"),
    [
        ("missing", "eq", "x"),
        ("missing", "ne", "x"),  # a missing field never satisfies even a negative condition
        ("customer.missing.deeper", "eq", "x"),
        ("items.7.sku", "eq", "LAMP-01"),  # index out of range
        ("items.-1.sku", "eq", "MUG-02"),  # no negative indexes
        ("items.first.sku", "eq", "LAMP-01"),  # not an index
        ("intent.0", "eq", "r"),  # strings are not indexable
        ("amount", "eq", "150"),  # a number is not its string
        ("flag", "eq", 1),  # true is not 1
        ("amount", "in", [True, "150"]),
        ("tags", "contains", "v"),  # list contains is element, not substring
        ("customer", "contains", "email"),  # objects contain nothing
        ("customer", "gt", 1),
        ("tags", "lt", 5),
        ("flag", "gte", 0),  # booleans are not numbers
        ("nothing", "lte", 0),
    ],
)
def test_fails_closed_on_missing_fields_and_wrong_types(field: str, op: str, value: Any) -> None:
    assert decides(allow_when(field, op, value), ARGS) is Decision.ASK


@pytest.mark.parametrize("amount", ["500", "1e9", None, [500], {"v": 500}, True])
def test_string_or_odd_amount_never_matches_a_numeric_allow(amount: Any) -> None:
    rules = allow_when("amount", "gt", 100)
    assert decides(rules, {"amount": amount}) is Decision.ASK
    assert decides(allow_when("amount", "lte", 1000), {"amount": amount}) is Decision.ASK


@pytest.mark.parametrize("args", [None, "amount=5", 5, ["amount", 5], True])
def test_non_dict_args_only_reach_the_default(args: Any) -> None:
    unconditional = RuleSet.from_dict({"rules": [{"tool": "t", "decision": "allow"}]})
    assert decides(unconditional, args) is Decision.ASK
    verdict = unconditional.evaluate("t", args)
    assert verdict.rule is None
    assert "default_decision" in verdict.reason


def test_first_match_wins() -> None:
    rules = RuleSet.from_dict(
        {
            "rules": [
                {
                    "tool": "refund",
                    "when": {"field": "amount", "op": "gt", "value": 1000},
                    "decision": "deny",
                },
                {
                    "tool": "refund",
                    "when": {"field": "amount", "op": "lte", "value": 50},
                    "decision": "allow",
                },
                {"tool": "refund", "decision": "ask"},
                {"tool": "refund", "decision": "allow"},
            ],
            "default_decision": "deny",
        }
    )
    assert rules.evaluate("refund", {"amount": 5000}).decision is Decision.DENY
    assert rules.evaluate("refund", {"amount": 5000}).rule == 0
    assert rules.evaluate("refund", {"amount": 20}).decision is Decision.ALLOW
    assert rules.evaluate("refund", {"amount": 20}).rule == 1
    assert rules.evaluate("refund", {"amount": 200}).decision is Decision.ASK
    assert rules.evaluate("refund", {"amount": 200}).rule == 2
    assert rules.evaluate("other", {"amount": 20}).decision is Decision.DENY
    assert rules.evaluate("other", {"amount": 20}).rule is None


@pytest.mark.parametrize("default", ["allow", "deny", "ask"])
def test_default_decision(default: str) -> None:
    rules = RuleSet.from_dict({"rules": [{"tool": "x", "decision": "deny"}], "default_decision": default})
    assert decides(rules, {}, tool="y") is Decision(default)
    assert decides(rules, {}, tool="x") is Decision.DENY


def test_default_decision_defaults_to_ask() -> None:
    assert decides(RuleSet.from_dict({"rules": []}), {}) is Decision.ASK
    assert decides(RuleSet.from_dict(None), {}) is Decision.ASK


def test_the_customer_service_rules_shape() -> None:
    rules = RuleSet.from_dict(
        {
            "rules": [
                {"tool": "lookup_order", "decision": "allow"},
                {
                    "tool": "send_email",
                    "when": {"field": "intent", "op": "eq", "value": "tracking_info"},
                    "decision": "allow",
                },
            ],
            "default_decision": "ask",
        }
    )
    assert decides(rules, {"order_id": "A-1001"}, "lookup_order") is Decision.ALLOW
    assert decides(rules, {"intent": "tracking_info"}, "send_email") is Decision.ALLOW
    assert decides(rules, {"intent": "refund"}, "send_email") is Decision.ASK
    assert decides(rules, {"intent": "TRACKING_INFO"}, "send_email") is Decision.ASK
    assert decides(rules, {"body": "no intent"}, "send_email") is Decision.ASK
    assert decides(rules, {"amount": 1}, "issue_refund") is Decision.ASK


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        (
            {
                "rules": [
                    {"tool": "t", "when": {"field": "a", "op": "regex", "value": "x"}, "decision": "allow"}
                ]
            },
            "rules[0].when.op: must be 'eq', 'ne', 'gt', 'gte', 'lt', 'lte', 'in' or 'contains', not 'regex'",
        ),
        (
            {
                "rules": [
                    {"tool": "t", "when": {"field": "a", "op": "eval", "value": "1"}, "decision": "allow"}
                ]
            },
            "rules[0].when.op",
        ),
        (
            {"rules": [{"tool": "t", "decision": "maybe"}]},
            "rules[0].decision: must be 'allow', 'deny' or 'ask', not 'maybe'",
        ),
        ({"rules": [{"tool": "t"}]}, "rules[0].decision: required key is missing"),
        ({"rules": [{"decision": "allow"}]}, "rules[0].tool: required key is missing"),
        ({"rules": [{"tool": "a", "decision": "ask"}, {"tool": 5, "decision": "allow"}]}, "rules[1]"),
        ({"rules": ["allow everything"]}, "rules[0]: must be a mapping of keys"),
        ({"rules": [], "default_decision": "yes"}, "default_decision: must be 'allow', 'deny' or 'ask'"),
        ({"rules": [{"tool": "t", "when": "amount > 5", "decision": "allow"}]}, "rules[0].when"),
        ({"rules": [{"tool": "t", "when": {"op": "eq", "value": 1}, "decision": "allow"}]}, "rules[0].when"),
        ({"rules": [{"tool": "t", "when": {"field": "a", "op": "eq"}, "decision": "allow"}]}, "value"),
        (
            {
                "rules": [
                    {"tool": "t", "when": {"field": "a", "op": "in", "value": "abc"}, "decision": "allow"}
                ]
            },
            "list",
        ),
        (
            {
                "rules": [
                    {"tool": "t", "when": {"field": "a", "op": "gt", "value": "100"}, "decision": "allow"}
                ]
            },
            "number",
        ),
        ({"rules": [{"tool": "t", "approvers": "ops@example.com", "decision": "ask"}]}, "approvers"),
        (["not", "a", "mapping"], "mapping"),
    ],
)
def test_malformed_rules_raise_config_error_naming_the_problem(data: Any, complaint: str) -> None:
    with pytest.raises(ConfigError) as info:
        RuleSet.from_dict(data)
    assert complaint in str(info.value)


# -- property: allow-when rules + default ask never allow unless a condition genuinely holds --------

FIELDS = ["a", "b", "a.b", "a.0", "a.b.c", "l.1"]
OPS = ["eq", "ne", "gt", "gte", "lt", "lte", "in", "contains"]
_scalar = st.one_of(
    st.sampled_from([0, 1, -1, 1.0, 2.5, True, False, None, "", "a", "ab", "1", "refund"]),
    st.integers(-5, 5),
    st.floats(-5, 5, allow_nan=False),
    st.text(alphabet="ab1", max_size=3),
)
_tricky = st.sampled_from([True, False, 0, 1, 1.0, "1", "a", "", None, ["a"], [1], {"a": 1}])
_json = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "c", "0"]), inner),
    max_leaves=6,
)
_number = st.one_of(st.integers(-5, 5), st.floats(-5, 5, allow_nan=False))


def _value_for(op: str) -> st.SearchStrategy[Any]:
    if op in ("gt", "gte", "lt", "lte"):
        return _number
    if op == "in":
        return st.lists(_tricky | _scalar, max_size=4)
    return _tricky | _json


@st.composite
def _conditions(draw: st.DrawFn) -> dict[str, Any]:
    op = draw(st.sampled_from(OPS))
    return {"field": draw(st.sampled_from(FIELDS)), "op": op, "value": draw(_value_for(op))}


def _twin(value: Any, how: int) -> Any:
    """Something close to ``value`` that may or may not be equal to it in JSON terms."""
    if how == 0:
        return value
    if how == 1 and isinstance(value, bool):
        return int(value)
    if how == 1 and _is_number(value) and value in (0, 1):
        return bool(value)
    if how == 2:
        return str(value)
    if how == 3:
        return [value]
    if how == 4 and isinstance(value, list) and value:
        return value[0]
    if how == 5 and _is_number(value):
        return value + 0.5
    return value


def _put(args: dict[str, Any], path: str, value: Any) -> None:
    """Write ``value`` at a dot path of FIELDS, building the containers on the way."""
    head, *rest = path.split(".")
    if not rest:
        args[head] = value
    elif rest == ["0"]:
        args[head] = [value]
    elif rest == ["1"]:
        args[head] = ["x", value]
    elif rest == ["b"]:
        args[head] = {"b": value}
    else:
        args[head] = {"b": {"c": value}}


@st.composite
def _args_near(draw: st.DrawFn, conds: list[dict[str, Any]]) -> dict[str, Any]:
    """Random args, often with a condition's field set to (a twin of) its value."""
    args = draw(st.dictionaries(st.sampled_from(["a", "b", "l"]), _json, max_size=3))
    for cond in conds:
        if draw(st.booleans()):
            _put(args, cond["field"], _twin(cond["value"], draw(st.integers(0, 5))))
    return args


_MISSING = object()


def _path(args: Any, path: str) -> Any:
    """An independent dot-path lookup: objects by key, arrays by non-negative decimal index."""
    cur = args
    for part in path.split("."):
        if isinstance(cur, dict):
            if part not in cur:
                return _MISSING
            cur = cur[part]
        elif isinstance(cur, list) and part.isascii() and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return _MISSING
    return cur


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers, 1 equals 1.0, containers compare element-wise."""
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _genuinely_holds(cond: dict[str, Any], args: dict[str, Any]) -> bool:
    actual, op, value = _path(args, cond["field"]), cond["op"], cond["value"]
    if actual is _MISSING:
        return False
    if op == "eq":
        return _json_equal(actual, value)
    if op == "ne":
        return not _json_equal(actual, value)
    if op in ("gt", "gte", "lt", "lte"):
        if not (_is_number(actual) and _is_number(value)):
            return False
        compared: bool = {
            "gt": actual > value,
            "gte": actual >= value,
            "lt": actual < value,
            "lte": actual <= value,
        }[op]
        return compared
    if op == "in":
        return any(_json_equal(actual, v) for v in value)
    assert op == "contains"
    if isinstance(actual, str):
        return isinstance(value, str) and value in actual
    return isinstance(actual, list) and any(_json_equal(v, value) for v in actual)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), conds=st.lists(_conditions(), min_size=1, max_size=3))
def test_allow_rules_with_default_ask_never_allow_unless_a_condition_holds(
    data: st.DataObject, conds: list[dict[str, Any]]
) -> None:
    args = data.draw(_args_near(conds))
    rules = RuleSet.from_dict(
        {"rules": [{"tool": "t", "when": c, "decision": "allow"} for c in conds], "default_decision": "ask"}
    )
    verdict = rules.evaluate("t", args)
    holding = [i for i, c in enumerate(conds) if _genuinely_holds(c, args)]
    if verdict.decision is Decision.ALLOW:
        assert verdict.rule in holding, f"allowed by rule {verdict.rule} whose condition does not hold"
        assert verdict.rule == holding[0], "the first matching rule must win"
    else:
        assert verdict.decision is Decision.ASK
        assert holding == [], f"rule {holding} holds but the gate did not allow"
    # another tool never reaches these rules
    assert rules.evaluate("u", args).decision is Decision.ASK
