"""``@frozen`` behaves as ``@dataclass(frozen=True)``: each case runs against a stdlib twin of the class.

``shapes(decorate)`` defines the same classes under either decorator (same qualified names), so every
comparison below is "what the standard library's frozen dataclass does" against ours: construction,
equality, hashing, repr, immutability, ``replace`` / ``fields`` / ``asdict``, pattern matching,
inheritance, pickling. The engine's records depend on all of it (checkpoints compare, sets of records,
repr in logs and test failures); only the cost of making the class differs (one compiled method).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from collections.abc import Callable
from dataclasses import FrozenInstanceError, dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from loopengine.domain import frozen as frozen_module
from loopengine.domain.frozen import frozen


def stdlib(cls: Any = None, /, *, kw_only: bool = False) -> Any:
    def wrap(c: type) -> type:
        return dataclass(c, frozen=True, kw_only=kw_only)

    return wrap if cls is None else wrap(cls)


def shapes(decorate: Callable[..., Any]) -> SimpleNamespace:
    """The same classes, decorated by ``decorate`` (``frozen`` or ``stdlib``)."""

    @decorate
    class Empty:
        pass

    @decorate
    class One:
        x: int

    @decorate
    class Point:
        x: int
        y: str = "a"
        tags: list[int] = field(default_factory=list, compare=False, repr=False)
        note: str = field(default="", hash=False)
        KIND: ClassVar[str] = "point"

        def norm(self) -> int:
            return self.x

    @decorate(kw_only=True)
    class Base:
        at: float
        by: str = "x"

    @decorate(kw_only=True)
    class Child(Base):
        comment: str | None = None

    @decorate
    class Box:
        items: list[Any]

    @decorate
    class Mixed:
        a: int
        b: int = field(kw_only=True)
        c: str = "c"
        d: dict[str, int] = field(default_factory=dict, kw_only=True)

    @decorate
    class Extras:
        n: int
        fixed: str = field(default="f", init=False)
        made: list[int] = field(default_factory=list, init=False)
        never: int = field(init=False)

        def __post_init__(self) -> None:
            object.__setattr__(self, "doubled", self.n * 2)

    @decorate
    class OwnEq:
        x: int

        def __eq__(self, other: object) -> bool:
            return True

    @decorate
    class OwnRepr:
        x: int

        def __repr__(self) -> str:
            return "mine"

    @decorate
    class OwnHash:
        x: int

        def __hash__(self) -> int:
            return 7

    made = (Empty, One, Point, Base, Child, Box, Mixed, Extras, OwnEq, OwnRepr, OwnHash)
    return SimpleNamespace(**{c.__name__: c for c in made})


OURS, THEIRS = shapes(frozen), shapes(stdlib)


def both(name: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    return getattr(OURS, name)(*args, **kwargs), getattr(THEIRS, name)(*args, **kwargs)


CASES = [
    ("Empty", (), {}),
    ("One", (1,), {}),
    ("Point", (1,), {}),
    ("Point", (2, "b", [1, 2], "n"), {}),
    ("Base", (), {"at": 1.5}),
    ("Child", (), {"at": 1.5, "by": "y", "comment": "c"}),
    ("Box", ([1, {"a": (2,)}],), {}),
    ("Mixed", (1,), {"b": 2}),
    ("Mixed", (1, "x"), {"b": 2, "d": {"k": 1}}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES)
def test_repr_and_fields_are_the_standard_ones(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    ours, theirs = both(name, *args, **kwargs)
    assert repr(ours) == repr(theirs)
    assert dataclasses.is_dataclass(ours) and not isinstance(ours, type)
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(theirs)]
    assert dataclasses.asdict(ours) == dataclasses.asdict(theirs)
    assert getattr(type(ours), "__match_args__") == getattr(type(theirs), "__match_args__")  # noqa: B009


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES)
def test_equality_and_hash_are_by_value_as_the_standard_ones(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    ours, theirs = both(name, *args, **kwargs)
    again = copy.deepcopy(ours)
    assert again == ours and again.__ne__(ours) is False and again is not ours
    try:
        expected = hash(theirs)
    except TypeError:  # a list or a dict inside: unhashable in both
        with pytest.raises(TypeError):
            hash(ours)
    else:
        assert hash(ours) == expected == hash(again)
        assert len({ours, again}) == 1
    assert ours.__eq__(theirs) is NotImplemented and theirs.__eq__(ours) is NotImplemented
    assert ours != theirs  # another class: never equal, as the standard one


@pytest.mark.parametrize("name", ["Empty", "One", "Point", "Base", "Child", "Box", "Mixed", "Extras"])
def test_init_takes_the_standard_parameters_and_the_class_the_standard_doc(name: str) -> None:
    ours, theirs = getattr(OURS, name), getattr(THEIRS, name)
    assert str(inspect.signature(ours)) == str(inspect.signature(theirs))
    assert ours.__doc__ == theirs.__doc__  # a class without a docstring gets its signature
    assert ours.__init__.__qualname__ == f"{ours.__qualname__}.__init__"
    assert ours.__init__.__annotations__ == theirs.__init__.__annotations__


@pytest.mark.parametrize("ns", [OURS, THEIRS], ids=["frozen", "stdlib"])
def test_init_false_fields_and_post_init_work_as_the_standard_ones(ns: SimpleNamespace) -> None:
    e = ns.Extras(3)
    assert (e.n, e.fixed, e.made, e.doubled) == (3, "f", [], 6)
    assert "fixed" not in vars(e) and ns.Extras(1).made is not e.made  # class default; new list each
    assert not hasattr(e, "never")
    with pytest.raises(FrozenInstanceError):
        e.never = 1  # a field: frozen even while unset
    with pytest.raises(TypeError):
        ns.Extras(3, "f")
    m = ns.Mixed(1, "x", b=2)
    assert (m.a, m.b, m.c, m.d) == (1, 2, "x", {})
    with pytest.raises(TypeError):
        ns.Mixed(1)  # b is keyword-only and required


def test_compare_false_and_hash_false_fields_count_as_the_standard_ones_do() -> None:
    for ns in (OURS, THEIRS):
        a, b = ns.Point(1, "a", [1]), ns.Point(1, "a", [2])
        assert a == b and hash(a) == hash(b)  # tags: compare=False
        c, d = ns.Point(1, note="x"), ns.Point(1, note="y")
        assert c != d and hash(c) == hash(d)  # note: compared, not hashed
        assert ns.Point(1) != ns.Point(2) and ns.One(1) != ns.One(2)


def test_a_subclass_instance_never_equals_its_bases() -> None:
    for ns in (OURS, THEIRS):
        assert ns.Child(at=1.0) != ns.Base(at=1.0)
        assert ns.Child(at=1.0) == ns.Child(at=1.0)
        assert ns.Child(at=1.0, comment="a") != ns.Child(at=1.0, comment="b")


def test_a_recursive_value_reprs_as_the_standard_one() -> None:
    ours, theirs = OURS.Box([]), THEIRS.Box([])
    ours.items.append(ours)
    theirs.items.append(theirs)
    assert repr(ours) == repr(theirs) == f"{type(ours).__qualname__}(items=[...])"


@pytest.mark.parametrize("ns", [OURS, THEIRS], ids=["frozen", "stdlib"])
def test_fields_cannot_be_assigned_or_deleted(ns: SimpleNamespace) -> None:
    p = ns.Point(1)
    with pytest.raises(FrozenInstanceError, match="cannot assign to field 'x'"):
        p.x = 2
    with pytest.raises(FrozenInstanceError):
        p.other = 2  # not a field, on the class itself: refused as well
    with pytest.raises(FrozenInstanceError, match="cannot delete field 'y'"):
        del p.y
    child = ns.Child(at=1.0)
    with pytest.raises(FrozenInstanceError):
        child.at = 2.0  # a base's field, through a frozen subclass
    assert (p.x, p.y, child.at) == (1, "a", 1.0)


@pytest.mark.parametrize("ns", [OURS, THEIRS], ids=["frozen", "stdlib"])
def test_a_plain_subclass_may_add_attributes_but_not_touch_fields(ns: SimpleNamespace) -> None:
    class Plain(ns.Point):  # type: ignore[misc,name-defined]
        pass

    p = Plain(1)
    p.extra = "ok"
    assert p.extra == "ok"
    with pytest.raises(FrozenInstanceError):
        p.x = 3
    del p.extra
    with pytest.raises(FrozenInstanceError):
        del p.x


def test_replace_construction_errors_and_keywords_are_the_standard_ones() -> None:
    ours, theirs = both("Point", 1, "b")
    assert repr(dataclasses.replace(ours, x=5)) == repr(dataclasses.replace(theirs, x=5))
    assert dataclasses.replace(ours, x=5) == OURS.Point(5, "b")
    for ns in (OURS, THEIRS):
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
            ns.Point()
        with pytest.raises(TypeError, match="positional argument"):
            ns.Base(1.0)  # kw_only
        assert ns.Point(1).tags == [] and ns.Point(1).tags is not ns.Point(1).tags  # default_factory
        assert ns.Point.KIND == "point" and ns.Point(3).norm() == 3


def test_pattern_matching_copy_and_pickle_work_as_the_standard_ones() -> None:
    p = OURS.Point(4, "z")
    match p:
        case OURS.Point(x, y):
            assert (x, y) == (4, "z")
        case _:
            pytest.fail("no match")
    assert copy.copy(p) == p and copy.deepcopy(p) == p
    assert pickle.loads(pickle.dumps(the_module_level_record(1))) == the_module_level_record(1)


def test_methods_the_class_defines_itself_are_kept() -> None:
    for ns in (OURS, THEIRS):
        assert ns.OwnEq(1) == ns.OwnEq(2)
        assert hash(ns.OwnEq(1)) == hash(ns.OwnEq(1))  # an own __eq__ alone still gets the field hash
        assert repr(ns.OwnRepr(1)) == "mine"
        assert hash(ns.OwnHash(1)) == 7 and ns.OwnHash(1) == ns.OwnHash(1) != ns.OwnHash(2)


def test_what_the_standard_frozen_dataclass_refuses_is_refused() -> None:
    with pytest.raises(TypeError):

        @frozen
        class OwnSet:
            x: int

            def __setattr__(self, name: str, value: object) -> None: ...

    @dataclass
    class Mutable:
        x: int

    with pytest.raises(TypeError):

        @frozen
        class FromMutable(Mutable):  # type: ignore[misc]  # mypy says so too
            pass

    with pytest.raises(TypeError, match="non-default argument 'y' follows default argument"):

        @frozen
        class Order:
            x: int = 0
            y: int  # type: ignore[misc]  # mypy says so too


def test_what_frozen_does_not_do_is_refused_not_done_wrong() -> None:
    with pytest.raises(TypeError, match="InitVar"):

        @frozen
        class WithInitVar:
            x: int
            seed: dataclasses.InitVar[int]

    with pytest.raises(TypeError, match="self"):

        @frozen
        class Self:
            self: int

    with pytest.raises(TypeError, match="__slots__"):

        @frozen
        class Slotted:
            __slots__ = ("x",)
            x: int

    with pytest.raises(TypeError, match="descriptor"):

        @frozen
        class Described:
            x: int = property(lambda self: 1)  # type: ignore[assignment]

    class Guarded:
        def __setattr__(self, name: str, value: object) -> None: ...

    with pytest.raises(TypeError):

        @frozen
        class FromGuarded(Guarded):
            x: int


def test_dataclasses_compiles_nothing_for_a_frozen_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of it: the standard frozen dataclass compiles six methods per class, from long text."""
    if not hasattr(dataclasses, "_create_fn"):
        pytest.skip("this Python's dataclasses compiles its methods another way (3.13 and later)")
    made: list[str] = []
    real = dataclasses._create_fn

    def counting(name: str, *args: Any, **kwargs: Any) -> Any:
        made.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(dataclasses, "_create_fn", counting)
    shapes(frozen)
    assert made == []
    shapes(stdlib)
    assert {"__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__"} <= set(made)


def test_the_init_it_compiles_is_a_fraction_of_the_standard_text(monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(dataclasses, "_create_fn"):
        pytest.skip("this Python's dataclasses compiles its methods another way (3.13 and later)")
    texts: dict[str, list[str]] = {"frozen": [], "stdlib": []}
    side = "frozen"
    real_exec = exec

    def recording(source: Any, *args: Any) -> Any:
        if isinstance(source, str):
            texts[side].append(source)
        return real_exec(source, *args)

    monkeypatch.setitem(frozen_module.__dict__, "exec", recording)
    monkeypatch.setitem(dataclasses.__dict__, "exec", recording)
    shapes(frozen)
    side = "stdlib"
    shapes(stdlib)
    ours, theirs = sum(map(len, texts["frozen"])), sum(map(len, texts["stdlib"]))
    assert len(texts["frozen"]) == 11  # one __init__ per class, and nothing else
    assert ours * 8 < theirs, (ours, theirs)  # compiling costs about in proportion to the text


def test_the_shared_methods_are_the_modules_own() -> None:
    assert OURS.Point.__eq__ is frozen_module._eq and OURS.Point.__setattr__ is frozen_module._set


@frozen
class _Pickled:
    x: int


def the_module_level_record(x: int) -> _Pickled:
    return _Pickled(x)
