"""Four of moto's per-request costs, taken out without changing a single answer it gives.

The suite sends tens of thousands of DynamoDB requests to moto, and about a third of the test
processes' CPU went into moto and botocore. Four costs in moto grow with the table or repeat on
every request for nothing:

- **Every Query sorts the whole table.** ``Table.all_items`` (which every Query and Scan starts
  from) sorts all items by their keys, comparing ``DynamoType`` objects, and each comparison
  recomputes both sides' ``cast_value``. The shortcut sorts the same items by the same values,
  computed once per item: the same order.
- **``cast_value`` of a string asks five questions first** (number? set? list? map? null?) before
  it returns the value; strings are nearly every key and attribute here. The fast path answers
  ``"S"`` directly and leaves every other type to moto's own property: the same value.
- **Every attribute value of a response is looked up ten times.** moto's serializer walks each
  ``AttributeValue`` through all ten of its members (``S``, ``N``, ... ``BOOL``) and tries six
  aliases for each to find the one the value holds. A value here is a dict that holds its one
  member under the member's own name (no alias of another member is any member's name), so only
  the members it holds are walked: the same JSON.
- **Every request lists its handler class's methods** with ``inspect.getmembers`` (to check the
  action exists). A class's functions do not change while the tests run, so the list is kept.

``tests/test_moto_speedups.py`` checks each against moto's own code on generated tables and values.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _sort_key(item: Any) -> Any:
    """``(hash_key, range_key)`` (or ``hash_key``) as the values ``DynamoType``'s ``<`` compares.

    A key attribute holds one type (the table's schema says which), so equal values are equal keys.
    """
    if item.range_key:
        return item.hash_key.cast_value, item.range_key.cast_value
    return item.hash_key.cast_value


MOTO_OWN: dict[str, Any] = {}
"""moto's own ``cast_value`` getter, ``Table.all_items``, ``method_names_from_class`` and the JSON
serializer's ``_serialize_type_structure`` (for the tests)."""


@contextmanager
def faster_moto() -> Iterator[None]:
    """Within: the four shortcuts above (see the module's docstring)."""
    from moto.core import responses
    from moto.core.serialize import BaseJSONSerializer
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    real_cast_value = DynamoType.cast_value
    real_all_items = Table.all_items
    real_method_names = responses.method_names_from_class
    real_structure = BaseJSONSerializer._serialize_type_structure
    if not MOTO_OWN:
        MOTO_OWN.update(
            cast_value=real_cast_value.fget,  # type: ignore[attr-defined]
            all_items=real_all_items,
            method_names_from_class=real_method_names,
            serialize_type_structure=real_structure,
        )

    def cast_value(self: DynamoType) -> Any:
        if self.type == "S":
            return self.value
        return real_cast_value.fget(self)  # type: ignore[attr-defined]

    def all_items(self: Table) -> list[Any]:
        items: list[Any] = []
        for hash_set in self.items.values():
            if self.range_key_attr:
                items.extend(hash_set.values())
            else:
                items.append(hash_set)
        return sorted(items, key=_sort_key)

    def serialize_type_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        members = shape.members
        if shape.name != "AttributeValue" or type(value) is not dict or not value.keys() <= members.keys():
            return real_structure(self, serialized, value, shape, key)
        wrapper: Any = self.MAP_TYPE() if key else serialized
        for member_key, member_shape in members.items():
            member_shape.parent = shape
            if member_key in value:
                self._serialize_structure_member(wrapper, value, member_shape, member_key)
        if key:
            self._default_serialize(serialized, wrapper, shape, key)
        return None

    DynamoType.cast_value = property(cast_value)  # type: ignore[method-assign,assignment]
    Table.all_items = all_items  # type: ignore[method-assign]
    responses.method_names_from_class = functools.cache(real_method_names)  # type: ignore[attr-defined]
    BaseJSONSerializer._serialize_type_structure = serialize_type_structure  # type: ignore[method-assign]
    try:
        yield
    finally:
        BaseJSONSerializer._serialize_type_structure = real_structure  # type: ignore[method-assign]
        responses.method_names_from_class = real_method_names  # type: ignore[attr-defined]
        Table.all_items = real_all_items  # type: ignore[method-assign]
        DynamoType.cast_value = real_cast_value  # type: ignore[method-assign]
