"""``@frozen``: a frozen dataclass made for a fraction of what ``@dataclass(frozen=True)`` costs at import.

``@frozen`` stands for ``@dataclass(frozen=True)`` and ``@frozen(kw_only=True)`` for ``@dataclass(
frozen=True, kw_only=True)``; mypy checks both as it checks a frozen dataclass (``dataclass_transform``).
The class is a real dataclass (``dataclasses.fields`` / ``replace`` / ``asdict``, ``__match_args__``,
``field()`` with ``default``, ``default_factory``, ``init``, ``repr``, ``compare``, ``hash``,
``kw_only``; ``__post_init__``) and behaves as the frozen one:

    __init__  the same parameters, defaults and factories, in the same order; it puts every field in
              the instance's ``__dict__`` (what ``object.__setattr__`` does for a plain field), then
              calls ``__post_init__()`` if the class has one
    ==        ``other.__class__ is self.__class__`` and the tuples of the compared fields are equal
              (a field with ``compare=False`` is left out), else ``NotImplemented``
    hash      ``hash()`` of the tuple of the hashed fields (``compare``, or the field's own ``hash=``)
    repr      ``Name(a=1, b='x')`` over the fields with ``repr=True``; ``...`` for a recursive value
    frozen    assigning or deleting a field raises ``dataclasses.FrozenInstanceError``, and so does any
              other attribute on an instance of the class itself (a plain subclass may add its own)

Why: on Python 3.12 (Lambda's runtime) ``dataclasses`` writes each generated method as source text and
compiles it, six per frozen class, in every cold start: most of the engine's import, and compiling
is slow work for the instructions it takes. Here the last five are written once for every class,
and ``__init__`` is compiled from a fraction of the text (no annotations, one statement for all the
fields): about 3.5 million instructions fewer per class on Python 3.12, and an instance is made a
little faster than before (docs/performance.md "Cold start"). What it does not do is refused, not
done wrong: an ``InitVar``, a field named ``self``, ``__slots__``, a field that is a descriptor, a
base class that is a mutable dataclass or has its own ``__setattr__`` / ``__delattr__``. A method
the class body defines itself is kept, as ``dataclass`` keeps it; a mutable class stays a plain
``@dataclass``.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable, Sequence
from dataclasses import MISSING, Field, FrozenInstanceError, field
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")
Getter = Callable[[Any], tuple[Any, ...]]

_CLASS = "__frozen_class__"
_FIELDS = "__frozen_fields__"
_COMPARED = "__frozen_compared__"
_HASHED = "__frozen_hashed__"
_SHOWN = "__frozen_shown__"


class _Factory:
    """An ``__init__`` parameter's default when its field has a ``default_factory`` (as dataclass's)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


@overload
def frozen(cls: type[T], /) -> type[T]: ...
@overload
def frozen(*, kw_only: bool = False) -> Callable[[type[T]], type[T]]: ...
@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def frozen(cls: type[T] | None = None, /, *, kw_only: bool = False) -> Any:
    """``@dataclass(frozen=True)`` at a tenth of the cost (above)."""

    def wrap(cls: type[T]) -> type[T]:
        return _make(cls, kw_only=kw_only)

    return wrap if cls is None else wrap(cls)


def _make(cls: type[T], *, kw_only: bool) -> type[T]:
    body = dict(cls.__dict__)
    _refuse(cls, body)
    made = dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
    fields = dataclasses.fields(made)  # type: ignore[arg-type]  # made is a dataclass now
    setattr(made, _CLASS, made)
    setattr(made, _FIELDS, frozenset(f.name for f in fields))
    setattr(made, _COMPARED, staticmethod(_getter([f.name for f in fields if f.compare])))
    hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
    setattr(made, _HASHED, staticmethod(_getter(hashed)))
    setattr(made, _SHOWN, tuple(f.name for f in fields if f.repr))
    # dataclass's rule: a body's own __eq__ leaves __hash__ None there, and that is no hash of its own
    own_hash = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
    shared = {"__eq__": _eq, "__hash__": _hash, "__repr__": _repr, "__setattr__": _set, "__delattr__": _del}
    for name, method in shared.items():
        if name not in body or (name == "__hash__" and not own_hash):
            setattr(made, name, method)
    if "__init__" not in body:
        made.__init__ = _init(made, fields)  # type: ignore[method-assign]
        if not body.get("__doc__"):  # dataclass's doc of a class without one, from this __init__
            import inspect

            made.__doc__ = made.__name__ + str(inspect.signature(made)).replace(" -> None", "")
    return made


def _refuse(cls: type, body: dict[str, Any]) -> None:
    """What this decorator does not do (dataclass(frozen=True) refuses the first two as well)."""
    name = cls.__qualname__
    if "__setattr__" in body or "__delattr__" in body:
        raise TypeError(f"{name}: a frozen class cannot define __setattr__ or __delattr__")
    for base in cls.__mro__[1:-1]:
        if dataclasses.is_dataclass(base) and not hasattr(base, _CLASS):
            raise TypeError(f"{name}: a @frozen class cannot extend a mutable dataclass")
        if {base.__dict__.get(n, _set) for n in ("__setattr__", "__delattr__")} - {_set, _del}:
            raise TypeError(f"{name}: a @frozen class cannot extend a class with its own __setattr__")
    if "__slots__" in body:
        raise TypeError(f"{name}: a @frozen class keeps its fields in __dict__ (no __slots__)")
    for attr, annotation in body.get("__annotations__", {}).items():
        if hasattr(type(body.get(attr)), "__set__"):  # a descriptor-typed field: set through it, not here
            raise TypeError(f"{name}.{attr}: a @frozen field cannot be a descriptor")
        initvar = isinstance(annotation, dataclasses.InitVar) or annotation is dataclasses.InitVar
        if initvar or (isinstance(annotation, str) and "InitVar" in annotation) or attr == "self":
            raise TypeError(f"{name}.{attr}: @frozen takes no InitVar and no field named self")


def _init(cls: type, fields: Sequence[Field[Any]]) -> Callable[..., None]:
    """The ``__init__`` dataclass(frozen=True) would write for ``fields``, from a fraction of the text.

    Its parameters are dataclass's; its body is one statement that puts every value in the instance's
    ``__dict__`` (what ``object.__setattr__`` does for a field: no field is a descriptor, see
    :func:`_refuse`), then ``__post_init__()``. Names in the text that start with two underscores
    (``__n``, ``__d3`` ...) cannot be a field's: a class body would have mangled them.
    """
    space: dict[str, Any] = {"__name__": cls.__module__, "__m": _FACTORY}
    positional, keywords, names, values = ["self"], [], [], []
    seen_default = False
    for i, f in enumerate(fields):
        value = f.name
        if f.default_factory is not MISSING:
            space[f"__f{i}"] = f.default_factory
            param, value = f"{f.name}=__m", f"__f{i}() if {f.name} is __m else {f.name}"
            if not f.init:
                value = f"__f{i}()"
        elif f.default is not MISSING:
            space[f"__d{i}"] = f.default
            param = f"{f.name}=__d{i}"
        else:
            param = f.name
        if f.init or f.default_factory is not MISSING:  # else the class attribute holds the default
            names.append(f.name)
            values.append(value)
        if not f.init:
            continue
        if f.kw_only:
            keywords.append(param)
            continue
        if "=" in param:
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
        positional.append(param)
    space["__n"] = tuple(names)
    lines = [f" self.__dict__.update(zip(__n,({','.join(values)},)))"] if names else []
    if hasattr(cls, "__post_init__"):
        lines.append(" self.__post_init__()")
    params = ",".join(positional + (["*", *keywords] if keywords else []))
    exec(f"def __init__({params}):\n" + ("\n".join(lines) or " pass"), space)
    init: Callable[..., None] = space["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {f.name: f.type for f in fields if f.init} | {"return": None}
    return init


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
    if cls is getattr(cls, _CLASS) or name in getattr(cls, _FIELDS):
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)  # no base of a @frozen class has a __setattr__ of its own


def _del(self: object, name: str) -> None:
    cls = self.__class__
    if cls is getattr(cls, _CLASS) or name in getattr(cls, _FIELDS):
        raise FrozenInstanceError(f"cannot delete field {name!r}")
    object.__delattr__(self, name)
