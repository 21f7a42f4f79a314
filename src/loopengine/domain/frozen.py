"""``@frozen``: a frozen dataclass that compiles one method instead of six.

``@frozen`` stands for ``@dataclass(frozen=True)`` and ``@frozen(kw_only=True)`` for ``@dataclass(
frozen=True, kw_only=True)``; mypy checks both as it checks a frozen dataclass (``dataclass_transform``).
The class is a real dataclass (``dataclasses.fields`` / ``replace`` / ``asdict``, ``__match_args__``,
the same generated ``__init__``), and behaves as the frozen one would:

    ==       ``other.__class__ is self.__class__`` and the tuples of the compared fields are equal
             (a field with ``compare=False`` is left out), else ``NotImplemented``
    hash     ``hash()`` of the tuple of the hashed fields (``compare``, or the field's own ``hash=``)
    repr     ``Name(a=1, b='x')`` over the fields with ``repr=True``; ``...`` for a recursive value
    frozen   assigning or deleting a field raises ``dataclasses.FrozenInstanceError``, and so does any
             other attribute on an instance of the class itself (a plain subclass may add its own)

Why: on Python 3.12 (Lambda's runtime) ``dataclasses`` writes each generated method as source text and
compiles it, six per frozen class (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__``, ``__delattr__``), in every cold start: most of the engine's import. Five of them are
the same for every class, so they are written once, here; only ``__init__`` is compiled per class
(docs/performance.md "Cold start"). The one difference: ``dataclass`` generates that ``__init__`` as
for a mutable class (``self.x = x``), so the shared ``__setattr__`` lets each field be set once, while
the instance is made, and never again. A method the class body defines itself is kept, as
``dataclass`` keeps it; a mutable class stays a plain ``@dataclass``.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from dataclasses import Field, FrozenInstanceError, field
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")
Getter = Callable[[Any], tuple[Any, ...]]

_CLASS = "__frozen_class__"
_FIELDS = "__frozen_fields__"
_COMPARED = "__frozen_compared__"
_HASHED = "__frozen_hashed__"
_SHOWN = "__frozen_shown__"
_SHARED = ("__eq__", "__hash__", "__repr__", "__setattr__", "__delattr__")


@overload
def frozen(cls: type[T], /) -> type[T]: ...
@overload
def frozen(*, kw_only: bool = False) -> Callable[[type[T]], type[T]]: ...
@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def frozen(cls: type[T] | None = None, /, *, kw_only: bool = False) -> Any:
    """``@dataclass(frozen=True)``, its methods but ``__init__`` shared (above)."""

    def wrap(cls: type[T]) -> type[T]:
        return _make(cls, kw_only=kw_only)

    return wrap if cls is None else wrap(cls)


def _make(cls: type[T], *, kw_only: bool) -> type[T]:
    body = dict(cls.__dict__)
    if "__setattr__" in body or "__delattr__" in body:  # as dataclass(frozen=True) refuses them
        raise TypeError(f"{cls.__qualname__}: a frozen class cannot define __setattr__ or __delattr__")
    for base in cls.__mro__[1:-1]:
        mutable = dataclasses.is_dataclass(base) and not hasattr(base, _CLASS)
        if mutable or {base.__dict__.get(n, _set) for n in ("__setattr__", "__delattr__")} - {_set, _del}:
            raise TypeError(f"{cls.__qualname__}: a @frozen class extends only @frozen and plain classes")
    made = dataclasses.dataclass(cls, eq=False, repr=False, kw_only=kw_only)
    fields = dataclasses.fields(made)  # type: ignore[arg-type]  # made is a dataclass now
    unset = [f.name for f in fields if not f.init and f.default is f.default_factory is dataclasses.MISSING]
    if unset:  # __init__ would leave them unset, and the first assignment would then be allowed
        raise TypeError(f"{cls.__qualname__}: a field with init=False needs a default: {unset}")
    setattr(made, _CLASS, made)
    setattr(made, _FIELDS, frozenset(f.name for f in fields))
    setattr(made, _COMPARED, staticmethod(_getter([f.name for f in fields if f.compare])))
    hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
    setattr(made, _HASHED, staticmethod(_getter(hashed)))
    setattr(made, _SHOWN, tuple(f.name for f in fields if f.repr))
    # dataclass's rule: a body's own __eq__ leaves __hash__ None there, and that is no hash of its own
    own_hash = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
    shared = {"__eq__": _eq, "__hash__": _hash, "__repr__": _repr, "__setattr__": _set, "__delattr__": _del}
    for name in _SHARED:
        if name not in body or (name == "__hash__" and not own_hash):
            setattr(made, name, shared[name])
    return made


def _getter(names: list[str]) -> Getter:
    """The tuple of ``names``' values of an instance (``attrgetter`` returns a bare value for one name)."""
    if not names:
        return _nothing
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    many: Getter = attrgetter(*names)
    return many


def _nothing(obj: object) -> tuple[Any, ...]:
    return ()


def _eq(self: object, other: object) -> Any:  # a bool, or NotImplemented for another class
    if other.__class__ is self.__class__:
        values: Getter = getattr(self, _COMPARED)
        return values(self) == values(other)
    return NotImplemented


def _hash(self: object) -> int:
    values: Getter = getattr(self, _HASHED)
    return hash(values(self))


@reprlib.recursive_repr()
def _repr(self: object) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in getattr(self, _SHOWN))
    return f"{self.__class__.__qualname__}({shown})"


def _set(self: object, name: str, value: object) -> None:
    cls = self.__class__
    if name in getattr(cls, _FIELDS):
        if name in self.__dict__:  # set by __init__ already: from then on, the field is frozen
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
    elif cls is getattr(cls, _CLASS):
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)  # no base of a @frozen class has a __setattr__ of its own


def _del(self: object, name: str) -> None:
    cls = self.__class__
    if cls is getattr(cls, _CLASS) or name in getattr(cls, _FIELDS):
        raise FrozenInstanceError(f"cannot delete field {name!r}")
    object.__delattr__(self, name)
