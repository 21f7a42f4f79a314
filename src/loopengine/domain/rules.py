"""The rules file as a strict model, and the shared pieces of every agent config schema.

Unknown keys are errors (``approver:`` typed for ``approvers:`` must not silently let anyone
approve), ops and decisions come from fixed tables, durations and identities are checked, and
values are plain JSON (a YAML date or ``.nan`` would otherwise reach the config hash or a rule).
:func:`problems` turns a pydantic ``ValidationError`` into ``file:line: path: message`` lines.
"""

# No `from __future__ import annotations`: pydantic would compile each string annotation of the
# models below in every cold start (docs/performance.md "Cold start").
import math
import re
import types
import typing
from typing import Annotated, Any, Literal, Protocol, Self, TypeVar, Union, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from loopengine.domain.base.errors import ConfigError
from loopengine.domain.base.yaml_lines import Lines, Loc, Problem
from loopengine.domain.policy import parse_duration

Op = Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "contains"]
DecisionName = Literal["allow", "deny", "ask"]
OnExpiry = Literal["unknown", "deny"]
IDENTITY_KINDS = ("user", "group", "slack", "lark", "email")
NUMERIC_OPS = ("gt", "gte", "lt", "lte")


def _json(value: Any, depth: int = 0) -> Any:
    """Refuse anything that is not plain, finite JSON (YAML dates, sets, binary, NaN, ...)."""
    if depth > 32:
        raise ValueError("is nested too deeply")
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, not {value}")
        return value
    if isinstance(value, list):
        return [_json(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("mapping keys must be strings")
        return {k: _json(v, depth + 1) for k, v in value.items()}
    raise ValueError(
        f"must be plain JSON (text, number, true/false, null, list, mapping), not a {type(value).__name__}"
    )


def _duration(value: Any) -> float:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} is not a duration like 90s, 30m, 72h or 7d")
    try:
        return parse_duration(value, "")
    except ConfigError:
        raise ValueError(f"{value!r} is not a duration like 90s, 30m, 72h or 7d") from None


_IDENTITY = re.compile(r"^(?:(?P<kind>[a-z]+):)?(?P<rest>\S+)$")


def _identity(value: str) -> str:
    match = _IDENTITY.match(value)
    if match is None:
        raise ValueError(f"{value!r} is not an identity like alice, user:alice, group:finance, email:a@x.com")
    kind = match.group("kind")
    if kind is not None and kind not in IDENTITY_KINDS:
        raise ValueError(f"{value!r}: identity kind {kind!r} is not one of {', '.join(IDENTITY_KINDS)}")
    return value


JsonValue = Annotated[Any, AfterValidator(_json)]
Duration = Annotated[float, BeforeValidator(_duration)]
Identity = Annotated[str, AfterValidator(_identity)]
NonEmpty = Annotated[str, Field(min_length=1)]


class Strict(BaseModel):
    """Base of every config model: unknown keys are errors, no type coercion ("1" is not 1).

    Built on first use (``defer_build``): a process that never parses an agent file never builds them.
    """

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class WhenModel(Strict):
    """``when: {field, op, value}``."""

    field: NonEmpty
    op: Op
    value: JsonValue

    @model_validator(mode="after")
    def _value_fits_op(self) -> Self:
        if self.op == "in" and not isinstance(self.value, list):
            raise ValueError("'in' needs a list of values")
        if self.op in NUMERIC_OPS and (
            isinstance(self.value, bool) or not isinstance(self.value, int | float)
        ):
            raise ValueError(f"'{self.op}' compares numbers; give a number, not {self.value!r}")
        return self


class _Expiring(Protocol):
    on_expiry: object
    pending_ttl: object


E = TypeVar("E", bound=_Expiring)


def expiry_needs_ttl(model: E) -> E:
    """``on_expiry`` comes with a ``pending_ttl`` (a rule's or agent.yaml's): an ``after`` validator."""
    if model.on_expiry is not None and model.pending_ttl is None:
        raise ValueError("on_expiry needs a pending_ttl")
    return model


class RuleModel(Strict):
    """One rule: which tool, under which condition, decides what (and who may approve)."""

    tool: NonEmpty
    decision: DecisionName
    when: WhenModel | None = None
    reason: str | None = None
    approvers: list[Identity] | None = None
    pending_ttl: Duration | None = None
    on_expiry: OnExpiry | None = None

    _expiry_needs_ttl = model_validator(mode="after")(expiry_needs_ttl)


class RulesFile(Strict):
    """``rules.yaml``: ordered rules, then the decision when none matches."""

    rules: list[RuleModel] | None = None
    default_decision: DecisionName = "ask"


def location(loc: Loc) -> str:
    """``("rules", 1, "approver")`` -> ``rules[1].approver``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def problems(exc: ValidationError, model: type[BaseModel], file: str, lines: Lines) -> list[Problem]:
    """One :class:`Problem` per pydantic error, at the line of the key it is about."""
    out = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        where = location(loc)
        text = _message(err, model, loc)
        out.append(Problem(file, lines.line(loc), f"{where}: {text}" if where else text))
    return out


def summary(exc: ValidationError, model: type[BaseModel]) -> str:
    """Every error of ``exc`` as ``path: message``, joined (where no file lines are known)."""
    return "; ".join(p.message for p in problems(exc, model, "", Lines()))


def _message(err: Any, model: type[BaseModel], loc: Loc) -> str:
    kind, ctx, given = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        known = _fields_at(model, loc[:-1])
        import difflib  # only for a "did you mean" in an error: not at a cold start

        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
        return f"unknown key ({hint})"
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}, not {given!r}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping of keys, not {_kind(given)}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    msg = str(err["msg"])
    return f"{msg[:1].lower()}{msg[1:]}, not {given!r}"[:300]


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"


def _fields_at(model: type[BaseModel], loc: Loc) -> list[str]:
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return []
        if isinstance(part, int):
            continue
        info = current.model_fields.get(part)
        current = _inner_model(info.annotation) if info is not None else None
    return list(current.model_fields) if current is not None else []


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (list, Union, types.UnionType, Annotated):
        for arg in get_args(annotation):
            found = _inner_model(arg)
            if found is not None:
                return found
    return None
