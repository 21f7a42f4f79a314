"""Stored (camelCase) forms of frozen dataclasses: one codec instead of a ``to_dict``/``from_dict`` each.

A :class:`Stored` reads its record's fields once (``dataclasses.fields``, annotations evaluated by
``inspect.get_annotations``) and writes each field under its camelCase name, in field order, as its
type implies: a tuple is stored as a list, an enum as its value; read back, a ``float``/``int``/
``bool`` field is coerced (a number from DynamoDB or JSON may come back as the other kind), a tuple
rebuilt, a dict copied, an enum parsed. A field with a default is left out of the stored form while
it holds that default (the record stays small: a DynamoDB write is billed per KB) unless it is named
in ``always``; absent or null, it reads back as its default. What differs per record is said where
it is built: ``keys`` (a stored name that is not the camelCase one), ``first``/``last`` (fields
stored before or after the others, so existing records keep their bytes), ``convert`` (how a nested
record is written and read) and ``fallback`` (what a required field reads as when an older record
lacks it). tests/test_stored_forms.py pins the bytes.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Generic, NamedTuple, Self, TypeVar

from loopengine.domain.base.jsontypes import JsonDict

T = TypeVar("T")
Convert = Callable[[Any], Any]

_REQUIRED: Any = object()


def camel(name: str) -> str:
    """``results_so_far`` -> ``resultsSoFar``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _by_type(tp: Any) -> tuple[Convert | None, Convert | None]:
    """How a value of type ``tp`` is written and read (``None``: as it is)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(tp) if a is not type(None)]
        return _by_type(kinds[0]) if len(kinds) == 1 else (None, None)
    origin = typing.get_origin(tp) or tp
    if origin is tuple:
        return list, tuple
    if origin is dict:
        return None, dict
    if tp in (float, int, bool):
        return None, tp
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _value, tp
    return None, None


def _value(member: enum.Enum) -> Any:
    return member.value


class _Slot(NamedTuple):  # (a NamedTuple: cheaper to define at import than a slotted dataclass)
    name: str
    key: str
    dump: Convert | None
    load: Convert | None
    omit: bool
    """Left out while it holds ``default``."""
    default: Any
    """The field's default (a factory's product), or what an older record lacking it reads as."""
    factory: Callable[[], Any] | None


def _slot(
    f: dataclasses.Field[Any],
    tp: Any,
    keys: Mapping[str, str],
    convert: Mapping[str, tuple[Convert, Convert]],
    always: bool,
    fallback: Mapping[str, Any],
) -> _Slot:
    to, of = convert.get(f.name) or _by_type(tp)
    factory = None if f.default_factory is dataclasses.MISSING else f.default_factory
    default = f.default if factory is None else factory()
    required = default is dataclasses.MISSING
    if required:
        default = fallback.get(f.name, _REQUIRED)
    key = keys.get(f.name, camel(f.name))
    return _Slot(f.name, key, to, of, not (required or always), default, factory)


class Stored(Generic[T]):
    """The stored form of the frozen dataclass ``cls`` (see the module docstring)."""

    def __init__(
        self,
        cls: type[T],
        *,
        always: Iterable[str] = (),
        keys: Mapping[str, str] | None = None,
        first: Iterable[str] = (),
        last: Iterable[str] = (),
        convert: Mapping[str, tuple[Convert, Convert]] | None = None,
        fallback: Mapping[str, Any] | None = None,
    ) -> None:
        assert dataclasses.is_dataclass(cls)
        hints = inspect.get_annotations(cls, eval_str=True)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        head, tail, kept, older = list(first), list(last), set(always), fallback or {}
        order = head + [n for n in fields if n not in head and n not in tail] + tail
        self.cls = cls
        self._slots = tuple(
            _slot(fields[n], hints[n], keys or {}, convert or {}, n in kept, older) for n in order
        )

    def to_dict(self, record: T) -> JsonDict:
        """``record``'s stored form."""
        out: JsonDict = {}
        for name, key, dump, _load, omit, default, _factory in self._slots:
            value = getattr(record, name)
            if omit and value == default:
                continue
            out[key] = dump(value) if dump is not None and value is not None else value
        return out

    def from_dict(self, d: JsonDict) -> T:
        """Parse the stored form (``KeyError`` when a required field is missing)."""
        kwargs: dict[str, Any] = {}
        for name, key, _dump, load, _omit, default, factory in self._slots:
            value = d.get(key)
            if value is None and default is not _REQUIRED:
                kwargs[name] = factory() if factory is not None else default
            elif value is None and key not in d:
                raise KeyError(key)
            else:
                kwargs[name] = load(value) if load is not None and value is not None else value
        return self.cls(**kwargs)


class StoredForm:
    """A record with a stored form: ``to_dict``/``from_dict`` by its class's :class:`Stored` ``stored``.

    Set ``stored`` right after the (slotted, frozen) dataclass: ``Rec.stored = Stored(Rec, ...)``.
    """

    __slots__ = ()
    stored: ClassVar[Stored[Any]]

    def to_dict(self) -> JsonDict:
        """Stored (camelCase) form."""
        return self.stored.to_dict(self)

    @classmethod
    def from_dict(cls, d: JsonDict) -> Self:
        """Parse the stored form."""
        found: Self = cls.stored.from_dict(d)
        return found
