"""tests/moto_speedups.py gives moto's answers: the same values, the same order, the same methods.

The suite runs with the shortcuts installed (tests/conftest.py); moto's own code is in ``MOTO_OWN``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.contract.conftest import moto_dynamodb
from tests.moto_speedups import MOTO_OWN, faster_moto

TABLE = "speedups-test"

numbers = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.decimals(-(10**6), 10**6, allow_nan=False, allow_infinity=False, places=3).map(str),
)
blobs = st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode())
scalars = st.one_of(
    st.builds(lambda v: {"S": v}, st.text(max_size=8)),
    st.builds(lambda v: {"N": v}, numbers),
    st.builds(lambda v: {"B": v}, blobs),
    st.builds(lambda v: {"BOOL": v}, st.booleans()),
    st.just({"NULL": True}),
    st.builds(lambda v: {"SS": sorted(v)}, st.sets(st.text(max_size=4), min_size=1, max_size=3)),
    st.builds(lambda v: {"NS": sorted(v)}, st.sets(st.integers(-99, 99).map(str), min_size=1, max_size=3)),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.builds(lambda v: {"L": v}, st.lists(inner, max_size=3)),
        st.builds(lambda v: {"M": v}, st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    ),
    max_leaves=6,
)


@given(values)
def test_cast_value_is_motos_for_every_type(value: dict[str, Any]) -> None:
    from moto.dynamodb.models.dynamo_type import DynamoType

    with faster_moto():
        typed = DynamoType(value)
        assert typed.cast_value == MOTO_OWN["cast_value"](typed)


KEY_TYPES = {
    "S": st.text(alphabet="aAbZ0-_é", max_size=3).map(lambda v: v or "x"),
    "N": st.sampled_from(["-10", "-1.5", "0", "1", "2", "9", "10", "100", "1e2", "0.001"]),
    "B": st.binary(min_size=1, max_size=2).map(lambda b: base64.b64encode(b).decode()),
}


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """One mocked DynamoDB for every example (each example makes the table anew)."""
    with moto_dynamodb(TABLE) as made:
        yield made


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    hash_type=st.sampled_from(sorted(KEY_TYPES)),
    range_type=st.sampled_from([None, *sorted(KEY_TYPES)]),
    data=st.data(),
)
def test_a_table_lists_its_items_in_motos_order(
    client: Any, hash_type: str, range_type: str | None, data: Any
) -> None:
    """Numbers in number order (``9`` before ``10``), strings and bytes in byte order, as moto has them."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    keys = [("pk", hash_type, "HASH")] + ([("sk", range_type, "RANGE")] if range_type else [])
    items = data.draw(
        st.lists(
            st.fixed_dictionaries(
                {name: KEY_TYPES[kind].map(lambda v, k=kind: {k: v}) for name, kind, _ in keys}
            ),
            min_size=2,
            max_size=12,
        )
    )
    client.delete_table(TableName=TABLE)
    client.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": name, "KeyType": role} for name, _, role in keys],
        AttributeDefinitions=[{"AttributeName": name, "AttributeType": kind} for name, kind, _ in keys],
        BillingMode="PAY_PER_REQUEST",
    )
    for item in items:
        client.put_item(TableName=TABLE, Item={**item, "v": {"S": "x"}})
    table = dynamodb_backends[DEFAULT_ACCOUNT_ID][client.meta.region_name].get_table(TABLE)
    with faster_moto():
        fast = [i.to_json() for i in table.all_items()]
    assert fast == [i.to_json() for i in MOTO_OWN["all_items"](table)]


def test_a_handler_class_lists_the_same_methods_once() -> None:
    from moto.core import responses
    from moto.dynamodb.responses import DynamoHandler

    with faster_moto():
        listed = responses.method_names_from_class(DynamoHandler)
        assert listed == MOTO_OWN["method_names_from_class"](DynamoHandler)
        assert "query" in listed and "transact_write_items" in listed
        assert responses.method_names_from_class(DynamoHandler) is listed


def _body(operation: str, result: dict[str, Any]) -> str:
    """moto's JSON for ``result`` as the response of DynamoDB's ``operation``."""
    from moto.core.serialize import XFormedAttributePicker, get_serializer_class
    from moto.core.utils import get_service_model

    model = get_service_model("dynamodb")
    serializer = get_serializer_class("dynamodb", model.protocol)
    made = serializer(operation_model=model.operation_model(operation), value_picker=XFormedAttributePicker())
    body: str = made.serialize(result)["body"]
    return body


@given(st.lists(st.dictionaries(st.text(max_size=4), values, max_size=4), max_size=3))
def test_items_serialize_to_motos_json(items: list[dict[str, Any]]) -> None:
    from moto.core.serialize import BaseJSONSerializer

    results = [("GetItem", {"Item": item}) for item in items] + [
        ("Query", {"Items": items, "Count": len(items)})
    ]
    with faster_moto():
        fast = [_body(operation, result) for operation, result in results]
    with mock.patch.object(
        BaseJSONSerializer, "_serialize_type_structure", MOTO_OWN["serialize_type_structure"]
    ):
        assert fast == [_body(operation, result) for operation, result in results]
