"""tests/moto_rollback.py keeps moto's transactions as DynamoDB has them, with one table copy each.

The suite runs with it installed (tests/conftest.py); entering it again here is harmless.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.contract.conftest import moto_dynamodb
from tests.moto_rollback import one_rollback_copy

TABLE = "rollback-test"


def _put(key: str, condition: str | None = None) -> dict[str, Any]:
    put: dict[str, Any] = {"TableName": TABLE, "Item": {"pk": {"S": key}, "sk": {"S": "x"}}}
    if condition:
        put["ConditionExpression"] = condition
    return {"Put": put}


def _keys(client: Any) -> list[str]:
    return sorted(item["pk"]["S"] for item in client.scan(TableName=TABLE)["Items"])


def test_a_cancelled_transaction_leaves_the_table_as_it_was() -> None:
    with moto_dynamodb(TABLE) as client, one_rollback_copy():
        client.put_item(TableName=TABLE, Item={"pk": {"S": "old"}, "sk": {"S": "x"}})
        items = [_put("a"), _put("b"), _put("old", "attribute_not_exists(pk)")]

        with pytest.raises(ClientError) as raised:
            client.transact_write_items(TransactItems=items)

        assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
        assert _keys(client) == ["old"]
        client.transact_write_items(TransactItems=items[:2])
        assert _keys(client) == ["a", "b", "old"]


def test_a_transaction_copies_each_table_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.dynamodb.models.table import Table

    copies: list[str] = []
    real = copy._reconstruct  # type: ignore[attr-defined]

    def counting(x: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(x, Table):
            copies.append(x.name)
        return real(x, *args, **kwargs)

    monkeypatch.setattr(copy, "_reconstruct", counting)
    with moto_dynamodb(TABLE) as client, one_rollback_copy():
        client.transact_write_items(TransactItems=[_put("a"), _put("b"), _put("c")])
        assert copies == [TABLE]
        with pytest.raises(ClientError):
            client.transact_write_items(TransactItems=[_put("d"), _put("a", "attribute_not_exists(pk)")])
        assert copies == [TABLE, TABLE]
        assert _keys(client) == ["a", "b", "c"]
