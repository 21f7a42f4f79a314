"""The table's write tokens: our own landed write is a success, anyone else's is still a conflict.

Table-level checks under moto (botocore's real retries; a fault injected here is re-sent at once): every
send of one logical transaction carries one ``ClientRequestToken``; a re-sent put or transaction
that already landed succeeds; a condition failing on another writer's item still fails; a
``TransactionInProgressException`` is asked again with the same token. ``stamp_action`` is checked
on its own for the action shapes the adapter does not use yet (Update, Delete, ConditionCheck).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from loopengine.stores.dynamodb_codec import key, n, s
from loopengine.stores.dynamodb_table import (
    ABSENT,
    Condition,
    ConditionFailed,
    DynamoTable,
    TransactionCancelled,
    new_client,
    version_is,
)
from loopengine.stores.dynamodb_tokens import WRITE_TOKEN, carries, stamp_action
from tests.contract.conftest import moto_dynamodb
from tests.dynamodb_faults import ResponseLost

TABLE = "loopengine-tokens"


@dataclass
class Rig:
    """A table on moto, its client's fault hook, and every TransactWriteItems body sent."""

    table: DynamoTable
    faults: ResponseLost
    transactions: list[dict[str, Any]]

    def raw(self, pk: str) -> dict[str, Any] | None:
        """The stored item ``pk``/``X`` as DynamoDB holds it."""
        found: dict[str, Any] | None = self.table.client.get_item(
            TableName=TABLE, Key=key(pk, "X"), ConsistentRead=True
        ).get("Item")
        return found


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    """GIVEN a table on moto through a production-configured client (standard retries, 5 attempts)."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with moto_dynamodb(TABLE):
        client = new_client()
        sent: list[dict[str, Any]] = []

        def record(request: Any, **_: Any) -> None:
            sent.append(json.loads(request.body))

        client.meta.events.register("before-send.dynamodb.TransactWriteItems", record)
        yield Rig(DynamoTable(TABLE, client), ResponseLost(client), sent)


def thing(pk: str, version: int = 1) -> dict[str, Any]:
    """A small item ``pk``/``X`` at ``version``."""
    return {**key(pk, "X"), "version": n(version)}


def test_a_resent_create_that_landed_is_ours(rig: Rig) -> None:
    rig.faults.arm(0)
    rig.table.put(thing("a"), ABSENT)  # applied, response lost, re-sent: the condition fails on ours

    assert rig.faults.fired == ["PutItem"]
    stored = rig.raw("a")
    assert stored is not None and WRITE_TOKEN in stored


def test_a_resent_compare_and_set_that_landed_is_ours(rig: Rig) -> None:
    rig.table.put(thing("a", 1), ABSENT)
    rig.faults.arm(0)
    rig.table.put(thing("a", 2), version_is(1))

    assert rig.faults.fired == ["PutItem"]
    stored = rig.raw("a")
    assert stored is not None and stored["version"] == n(2)


def test_a_condition_failing_on_someone_elses_write_is_still_a_conflict(rig: Rig) -> None:
    rig.table.put(thing("a", 1), ABSENT)
    rig.table.put(thing("a", 2), version_is(1))  # another writer moved it on

    with pytest.raises(ConditionFailed) as lost:
        rig.table.put(thing("a", 2), version_is(1))
    assert lost.value.old is not None and lost.value.old["version"] == n(2)
    with pytest.raises(ConditionFailed):
        rig.table.put(thing("a"), ABSENT)
    # an item written before tokens existed (no wtok) is nobody's: a conflict too
    rig.table.client.put_item(TableName=TABLE, Item=thing("old"))
    with pytest.raises(ConditionFailed):
        rig.table.put(thing("old"), ABSENT)


def test_a_resent_transaction_that_landed_is_ours_with_one_token_on_every_send(rig: Rig) -> None:
    actions = [rig.table.put_action(thing(pk), ABSENT) for pk in ("a", "b")]
    rig.faults.arm(0)
    rig.table.transact(actions)

    assert rig.faults.fired == ["TransactWriteItems"]
    first, again = rig.transactions
    assert first == again  # botocore re-sent the very same request, token included
    token = first["ClientRequestToken"]
    assert len(token) <= 36
    stamps = [rig.raw(pk) for pk in ("a", "b")]
    assert all(stored is not None and stored[WRITE_TOKEN] == s(token) for stored in stamps)

    rig.table.transact([rig.table.put_action(thing(pk), ABSENT) for pk in ("c", "d")])
    assert rig.transactions[-1]["ClientRequestToken"] != token  # one token per logical write


def test_a_transaction_cancelled_by_someone_else_is_still_cancelled(rig: Rig) -> None:
    rig.table.put(thing("b"), ABSENT)
    actions = [rig.table.put_action(thing(pk), ABSENT) for pk in ("a", "b")]

    with pytest.raises(TransactionCancelled) as lost:
        rig.table.transact(actions)
    assert lost.value.failed(1) and not carries(lost.value.old(1), rig.transactions[-1]["ClientRequestToken"])
    assert rig.raw("a") is None


def test_a_transaction_still_in_progress_is_asked_again_with_the_same_token(rig: Rig) -> None:
    """botocore retries TransactionInProgress on its own; when it gives up, the adapter asks again.

    A client of two attempts (one backoff of botocore's, under a second): both are refused, then the
    adapter's own retry of the transaction lands, with the same token on all three sends.
    """
    client = new_client(max_attempts=2)
    table = DynamoTable(TABLE, client)
    sent: list[dict[str, Any]] = []
    refusals = {"left": 2}

    def in_progress(request: Any, **_: Any) -> AWSResponse | None:
        sent.append(json.loads(request.body))
        if refusals["left"] == 0:
            return None
        refusals["left"] -= 1
        body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#TransactionInProgressException"})
        headers = HTTPHeaders()
        headers["x-amzn-ErrorType"] = "TransactionInProgressException"
        return AWSResponse(request.url, 400, headers, _Raw(body.encode()))

    events: Any = client.meta.events  # a before-send handler may answer with a response
    events.register_first("before-send.dynamodb.TransactWriteItems", in_progress)
    table.transact([table.put_action(thing(pk), ABSENT) for pk in ("a", "b")])

    tokens = {body["ClientRequestToken"] for body in sent}
    assert len(sent) == 3 and len(tokens) == 1
    assert rig.raw("a") is not None and rig.raw("b") is not None


class _Raw:
    """The raw body of a response a ``before-send`` handler answers with (what botocore reads)."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def test_a_resent_update_transaction_that_landed_is_ours(rig: Rig) -> None:
    rig.table.put(thing("a", 1), ABSENT)
    update = {
        "Update": {
            "TableName": TABLE,
            "Key": key("a", "X"),
            "UpdateExpression": "SET #version = :next",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            **version_is(1).params(),
        }
    }
    update["Update"]["ExpressionAttributeValues"][":next"] = n(2)
    rig.faults.arm(0)
    rig.table.transact([update])

    assert rig.faults.fired == ["TransactWriteItems"]
    stored = rig.raw("a")
    assert stored is not None and stored["version"] == n(2)
    assert stored[WRITE_TOKEN] == s(rig.transactions[-1]["ClientRequestToken"])


@pytest.mark.parametrize(
    ("expression", "stamped"),
    [
        ("SET a = :a", "SET #wtok = :wtok, a = :a"),
        ("set a = :a REMOVE b", "set #wtok = :wtok, a = :a REMOVE b"),
        ("REMOVE b SET a = :a", "REMOVE b SET #wtok = :wtok, a = :a"),
        ("REMOVE b", "SET #wtok = :wtok REMOVE b"),
        ("ADD c :one", "SET #wtok = :wtok ADD c :one"),
    ],
)
def test_an_update_sets_the_token_in_its_expression(expression: str, stamped: str) -> None:
    condition = Condition("#v = :v", {"#v": "version"}, {":v": n(1)})
    action = {"Update": {"TableName": TABLE, "Key": key("a", "X"), "UpdateExpression": expression}}
    action["Update"] |= condition.params()

    out = stamp_action(action, "tok")["Update"]

    assert out["UpdateExpression"] == stamped
    assert out["ExpressionAttributeNames"] == {"#v": "version", "#wtok": WRITE_TOKEN}
    assert out["ExpressionAttributeValues"] == {":v": n(1), ":wtok": s("tok")}
    assert action["Update"]["UpdateExpression"] == expression  # the caller's action is left alone


def test_actions_that_write_no_item_are_left_alone() -> None:
    for kind in ("Delete", "ConditionCheck"):
        action = {kind: {"TableName": TABLE, "Key": key("a", "X"), **ABSENT.params()}}
        assert stamp_action(action, "tok") == action
