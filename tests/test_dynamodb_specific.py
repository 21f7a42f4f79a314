"""What only the DynamoDB adapter has to prove: item-size limits, request counts, atomic pointers.

The behaviour every store shares is in ``tests/contract``; these tests look under the hood (raw
items, the requests made) through moto, with fake credentials so nothing can reach real AWS.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import secrets
import subprocess
import sys
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopengine.app.ports import Append, Change, Stores
from loopengine.domain import checkpoint as transitions
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import AlreadyExists, StoreError, VersionConflict
from loopengine.domain.base.ids import new_id
from loopengine.domain.decisions import DecidedBy
from loopengine.domain.messages import Message, TextBlock, ToolResultBlock
from loopengine.stores.dynamodb import count_requests, open_dynamodb_stores
from loopengine.stores.dynamodb_checkpoints import DynamoCheckpointStore
from loopengine.stores.dynamodb_codec import INLINE_LIMIT, PART_SIZE, ZDICT_1, shard_of, sortable
from loopengine.stores.dynamodb_table import DynamoTable
from tests.contract import T0, call, checkpoint, item, turn
from tests.contract.conftest import FAKE_AWS, fake_session, moto_dynamodb

TABLE = "loopengine-test"
WHO = DecidedBy("ops@example.com", "http")
MB = 1_000_000
DAY = 86_400
ZDICT_1_SHA256 = "90b35e3d58977c59ed8c409f7edc72fd6da33a639c2c517d5ac6200cadba87b4"


@dataclass
class Dynamo:
    """Stores on a fresh moto table, the raw client, and a counter of the requests made."""

    stores: Stores
    client: Any
    clock: FakeClock
    requests: Counter[str]

    def raw(self, pk: str, sk: str) -> dict[str, Any] | None:
        """The stored item as DynamoDB holds it."""
        found: dict[str, Any] | None = self.client.get_item(
            TableName=TABLE, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
        ).get("Item")
        return found

    def scan(self) -> list[dict[str, Any]]:
        """Every item of the table."""
        pages = self.client.get_paginator("scan").paginate(TableName=TABLE)
        return [i for page in pages for i in page["Items"]]


@pytest.fixture
def dynamo() -> Iterator[Dynamo]:
    """GIVEN an empty table under moto and the stores on it."""
    clock = FakeClock()
    with moto_dynamodb(TABLE) as client:
        stores = open_dynamodb_stores(TABLE, clock, client=client)
        yield Dynamo(stores, client, clock, count_requests(client))


def big_text(size: int, seed: int = 0) -> str:
    """``size`` characters zlib cannot shrink below 3/4 (random letters), some non-ASCII at the end.

    The store compresses bodies: text that repeats would fit in one item and never spill."""
    letters = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    uniform = bytes(letters[byte % 64] for byte in range(256))  # each letter from 4 of 256 bytes
    return random.Random(seed).randbytes(size - 2).translate(uniform).decode("ascii") + "é✓"


def item_size(found: dict[str, Any]) -> int:
    """An upper bound of DynamoDB's size of an item (names plus values, escaped as JSON at worst)."""
    total = 0
    for name, value in found.items():
        (kind, raw), *_ = value.items()
        if kind in ("SS", "BS"):  # a set: its members
            total += len(name) + sum(len(m) if kind == "BS" else len(m.encode()) for m in raw)
        else:
            total += len(name) + (len(raw) if kind == "B" else len(str(raw).encode()))
    return total


# --- size limits -------------------------------------------------------------------------------


def test_a_several_megabyte_history_and_a_big_checkpoint_round_trip(dynamo: Dynamo) -> None:
    session = new_id("s_")
    history = [Message("user", (ToolResultBlock(f"toolu_{i}", big_text(1_500_000, i)),)) for i in range(5)]
    history.insert(1, Message("assistant", (TextBlock("noted"),)))
    result = ToolResultBlock("toolu_big", big_text(1 * MB))
    cp = checkpoint(results_so_far=(result,))

    dynamo.stores.sessions.append(session, history[:2], expected_len=0)
    dynamo.stores.sessions.append(session, history[2:], expected_len=2)
    dynamo.stores.checkpoints.create(cp)

    assert dynamo.stores.sessions.load(session) == history
    assert dynamo.stores.checkpoints.get(cp.id) == cp
    pending = next(iter(cp.outstanding.values()))
    assert dynamo.stores.checkpoints.find_by_pending(pending.pending_id) == cp
    sizes = [item_size(found) for found in dynamo.scan()]
    assert sum(sizes) > 8 * MB
    assert max(sizes) < 400_000


def test_a_big_checkpoint_survives_replace_and_a_lost_race(dynamo: Dynamo) -> None:
    first, second = item(), item()
    cp = checkpoint(first, second, results_so_far=(ToolResultBlock("toolu_big", big_text(MB)),))
    dynamo.stores.checkpoints.create(cp)
    more = ToolResultBlock("toolu_more", big_text(MB, 3))
    bigger = dataclasses.replace(cp, results_so_far=(*cp.results_so_far, more))
    winner = dynamo.stores.checkpoints.replace(bigger)
    dynamo.requests.clear()

    with pytest.raises(VersionConflict) as lost:
        dynamo.stores.checkpoints.replace(transitions.deny(cp, first, None, WHO, T0 + 1))

    assert lost.value.current == winner
    assert dynamo.requests["GetItem"] == 0  # the stored record came back with the failed write
    assert dynamo.stores.checkpoints.get(cp.id) == winner


def test_big_events_calls_turns_and_configs_round_trip(dynamo: Dynamo) -> None:
    turns = dynamo.stores.turns
    record = turn(text=big_text(MB))
    started = call(record.turn_id)
    result = {"type": "tool_result", "tool_use_id": started.tool_use_id, "content": big_text(MB, 1)}
    event = {"type": "tool_finished", "at": T0, "output": big_text(MB, 2)}
    snapshot = {"system": big_text(MB, 4)}

    turns.create_turn(record)
    turns.add_event(record.turn_id, event)
    turns.start_call(started)
    turns.finish_call(dataclasses.replace(started, outcome="ok", result=result, finished_at=T0 + 1))
    turns.put_config("big", snapshot)

    assert turns.get_turn(record.turn_id) == record
    assert turns.session_turns(record.session_id) == [record]
    assert turns.events(record.turn_id) == [event]
    assert turns.calls(record.turn_id)[started.tool_use_id].result == result
    assert turns.get_config("big") == snapshot


def test_only_bodies_past_the_inline_limit_spill_into_parts(dynamo: Dynamo) -> None:
    small, large = new_id("s_"), new_id("s_")
    dynamo.stores.sessions.append(small, [Message.user_text("x" * 300_000)], expected_len=0)
    noise = secrets.token_bytes(INLINE_LIMIT).hex()  # zlib can only halve hex: still past the limit
    dynamo.stores.sessions.append(large, [Message.user_text(noise)], expected_len=0)

    inline = dynamo.raw(f"SESSION#{small}", "MSG#0000000000")
    spilled = dynamo.raw(f"SESSION#{large}", "MSG#0000000000")
    assert inline is not None and "z1" in inline and len(inline["z1"]["B"]) < 1_000  # compressed
    assert spilled is not None and not {"data", "z1"} & set(spilled)
    assert spilled["parts"] == {"N": "3"}  # 700 KB of JSON in parts of at most PART_SIZE bytes
    assert dynamo.stores.sessions.load(large)[0].text == noise
    assert 2 * PART_SIZE < 2 * INLINE_LIMIT <= 3 * PART_SIZE


def test_a_missing_blob_part_is_a_store_error_not_a_wrong_record(dynamo: Dynamo) -> None:
    cp = checkpoint(results_so_far=(ToolResultBlock("toolu_big", big_text(MB)),))
    dynamo.stores.checkpoints.create(cp)
    stored = dynamo.raw(f"CP#{cp.id}", "CP")
    assert stored is not None
    key = {"pk": {"S": f"BLOB#{stored['blob']['S']}"}, "sk": {"S": "PART#00001"}}
    dynamo.client.delete_item(TableName=TABLE, Key=key)

    with pytest.raises(StoreError, match="incomplete or corrupt"):
        dynamo.stores.checkpoints.get(cp.id)


def test_a_corrupt_compressed_body_is_a_store_error_not_a_wrong_record(dynamo: Dynamo) -> None:
    cp = checkpoint(results_so_far=(ToolResultBlock("toolu_mid", "a result " * 100),))
    dynamo.stores.checkpoints.create(cp)
    stored = dynamo.raw(f"CP#{cp.id}", "CP")
    assert stored is not None and "z1" in stored  # 1 KB of JSON: stored compressed
    packer = zlib.compressobj(zdict=ZDICT_1)
    not_json = packer.compress(b'{"id": ') + packer.flush()
    for damaged in (stored["z1"]["B"][:-8], not_json):  # cut short; not JSON
        dynamo.client.put_item(TableName=TABLE, Item={**stored, "z1": {"B": damaged}})
        with pytest.raises(StoreError, match="compressed body is corrupt"):
            dynamo.stores.checkpoints.get(cp.id)


def test_the_preset_dictionary_never_changes() -> None:
    """Items hold bodies compressed with it: a changed dictionary would make them unreadable."""
    assert hashlib.sha256(ZDICT_1).hexdigest() == ZDICT_1_SHA256


def test_an_append_of_more_than_99_messages_is_still_one_transaction(dynamo: Dynamo) -> None:
    session = new_id("s_")
    history = [Message.user_text(f"m{i}") for i in range(250)]
    dynamo.requests.clear()

    dynamo.stores.sessions.append(session, history, expected_len=0)

    assert dynamo.requests == Counter(Query=1, TransactWriteItems=1)  # the length, then one write
    assert dynamo.stores.sessions.load(session) == history


# --- requests per operation ------------------------------------------------------------------


def test_each_operation_costs_a_known_number_of_requests(dynamo: Dynamo) -> None:
    stores, costs = dynamo.stores, {}
    first, second = item(), item()
    cp = checkpoint(first, second)
    record, session = turn(), new_id("s_")

    def cost(name: str, work: Any) -> Any:
        dynamo.requests.clear()
        out = work()
        costs[name] = dict(dynamo.requests)
        return out

    cost("create checkpoint", lambda: stores.checkpoints.create(cp))
    cost("get checkpoint", lambda: stores.checkpoints.get(cp.id))
    cost("find_by_pending", lambda: stores.checkpoints.find_by_pending(first.pending_id))
    cost("find_with_turn", lambda: stores.checkpoints.find_with_turn(first.pending_id))
    claim = transitions.approve(cp, first, first.args, WHO, T0, edited=False)
    cost("replace checkpoint", lambda: stores.checkpoints.replace(claim))
    cost("list_open", lambda: stores.checkpoints.list_open(cp.tenant, agent=cp.agent))
    cost("append", lambda: stores.sessions.append(session, [Message.user_text("hi")], 0))
    cost("load", lambda: stores.sessions.load(session))
    cost("create_turn", lambda: stores.turns.create_turn(record))
    cost("replace_turn", lambda: stores.turns.replace_turn(record))
    cost("session_turns", lambda: stores.turns.session_turns(record.session_id))
    cost("add_event", lambda: stores.turns.add_event(record.turn_id, {"type": "x", "at": T0}))
    cost("start_call", lambda: stores.turns.start_call(call(record.turn_id)))

    assert costs == {
        "create checkpoint": {"TransactWriteItems": 1},
        "get checkpoint": {"GetItem": 1},
        "find_by_pending": {"GetItem": 2},
        "find_with_turn": {"GetItem": 1, "BatchGetItem": 1},  # the pointer names the turn too
        "replace checkpoint": {"PutItem": 1},
        "list_open": {"Query": 16, "BatchGetItem": 1},  # one Query per index shard
        "append": {"Query": 1, "PutItem": 1},  # the length (its last item), then its one item
        "load": {"Query": 1},
        "create_turn": {"TransactWriteItems": 1},
        "replace_turn": {"PutItem": 1},
        "session_turns": {"Query": 1, "BatchGetItem": 1},
        "add_event": {"PutItem": 1},
        "start_call": {"TransactWriteItems": 1},  # its item and the head's claimed set
    }


def test_a_lost_compare_and_set_needs_no_second_read(dynamo: Dynamo) -> None:
    first, second = item(), item()
    cp = checkpoint(first, second)
    dynamo.stores.checkpoints.create(cp)
    winner = dynamo.stores.checkpoints.replace(transitions.deny(cp, first, None, WHO, T0 + 1))
    record = turn()
    dynamo.stores.turns.create_turn(record)
    turn_winner = dynamo.stores.turns.replace_turn(dataclasses.replace(record, lease_until=T0 + 5))
    dynamo.requests.clear()

    with pytest.raises(VersionConflict) as lost:
        dynamo.stores.checkpoints.replace(transitions.approve(cp, second, {}, WHO, T0, False))
    with pytest.raises(VersionConflict) as lost_turn:
        dynamo.stores.turns.replace_turn(dataclasses.replace(record, lease_until=T0 + 9))

    assert (lost.value.current, lost_turn.value.current) == (winner, turn_winner)
    # the turn's loser is answered from the later version this process wrote: not even a request
    assert dynamo.requests == Counter(PutItem=1)


def test_a_stale_turn_from_another_process_costs_one_read_and_no_write(dynamo: Dynamo) -> None:
    record = turn()
    dynamo.stores.turns.create_turn(record)
    winner = dynamo.stores.turns.replace_turn(dataclasses.replace(record, lease_until=T0 + 5))
    elsewhere = open_dynamodb_stores(TABLE, dynamo.clock, client=dynamo.client)
    dynamo.requests.clear()

    with pytest.raises(VersionConflict) as lost:
        elsewhere.turns.replace_turn(dataclasses.replace(record, lease_until=T0 + 9))

    assert lost.value.current == winner
    assert dynamo.requests == Counter(GetItem=1)


def test_a_stale_append_is_refused_after_one_read_and_writes_nothing(dynamo: Dynamo) -> None:
    session = new_id("s_")
    dynamo.stores.sessions.append(session, [Message.user_text(f"{i}") for i in range(3)], 0)
    dynamo.requests.clear()

    for expected in (1, 5):  # behind the history, and ahead of it
        with pytest.raises(VersionConflict) as lost:
            dynamo.stores.sessions.append(session, [Message.user_text("late")], expected_len=expected)
        assert lost.value.current == 3

    assert dynamo.requests == Counter(Query=2)
    assert len(dynamo.stores.sessions.load(session)) == 3


def test_a_transition_whose_append_lost_learns_it_from_the_failed_transaction(dynamo: Dynamo) -> None:
    """No head item: the message item at the expected length exists, and that is the conflict."""
    session = new_id("s_")
    dynamo.stores.sessions.append(session, [Message.user_text(f"{i}") for i in range(3)], 0)
    record = dataclasses.replace(turn(), session_id=session)
    dynamo.requests.clear()

    with pytest.raises(VersionConflict) as lost:
        late = Append(session, (Message.user_text("late"),), 1)
        dynamo.stores.turns.commit(Change(record.turn_id, new_turn=record, append=late))

    assert isinstance(lost.value.current, int) and lost.value.current > 1
    assert dynamo.requests == Counter(TransactWriteItems=1)
    assert dynamo.stores.turns.get_turn(record.turn_id) is None  # nothing of it landed


def test_a_grouped_append_still_guards_the_next_one(dynamo: Dynamo) -> None:
    """Past 89 messages an append groups them into fewer items; the next append's guard still holds."""
    session = new_id("s_")
    dynamo.stores.sessions.append(session, [Message.user_text(f"m{i}") for i in range(250)], 0)
    dynamo.stores.sessions.append(session, [Message.user_text("next")], 250)
    with pytest.raises(VersionConflict):
        dynamo.stores.sessions.append(session, [Message.user_text("stale")], 250)
    stale = Append(session, (Message.user_text("stale"),), 250)
    record = dataclasses.replace(turn(), session_id=session)
    with pytest.raises(VersionConflict):
        dynamo.stores.turns.commit(Change(record.turn_id, new_turn=record, append=stale))
    assert [m.text for m in dynamo.stores.sessions.load(session)][-2:] == ["m249", "next"]


# --- atomic pause ------------------------------------------------------------------------------


def test_a_taken_pointer_fails_the_whole_pause_and_writes_nothing(dynamo: Dynamo) -> None:
    taken = new_id("p_")
    dynamo.client.put_item(
        TableName=TABLE,
        Item={"pk": {"S": f"PENDING#{taken}"}, "sk": {"S": "PENDING"}, "checkpointId": {"S": "cp_x"}},
    )
    fresh = item()
    cp = checkpoint(fresh, item(taken))
    dynamo.requests.clear()

    with pytest.raises(AlreadyExists):
        dynamo.stores.checkpoints.create(cp)

    assert dynamo.requests == Counter(TransactWriteItems=1)
    assert dynamo.raw(f"CP#{cp.id}", "CP") is None
    assert dynamo.raw(f"PENDING#{fresh.pending_id}", "PENDING") is None
    assert dynamo.raw(f"PENDING#{taken}", "PENDING") == {
        "pk": {"S": f"PENDING#{taken}"},
        "sk": {"S": "PENDING"},
        "checkpointId": {"S": "cp_x"},
    }


def test_only_open_checkpoints_carry_the_index_keys_and_only_closed_ones_a_ttl(dynamo: Dynamo) -> None:
    first = item()
    cp = checkpoint(first, created_at=T0 + 1)
    dynamo.stores.checkpoints.create(cp)
    opened = dynamo.raw(f"CP#{cp.id}", "CP")

    dynamo.clock.advance(60)
    dynamo.stores.checkpoints.replace(transitions.deny(cp, first, None, WHO, T0 + 2))
    closed = dynamo.raw(f"CP#{cp.id}", "CP")

    assert opened is not None and closed is not None
    assert opened["gsi1pk"] == {"S": f"OPEN#{cp.tenant}#{shard_of(cp.id, 16)}"}
    assert opened["gsi1sk"] == {"S": f"{sortable(T0 + 1)}#{cp.id}"}
    assert "ttl" not in opened
    assert "gsi1pk" not in closed and "gsi1sk" not in closed
    assert closed["ttl"] == {"N": str(int(dynamo.clock.now()) + 90 * DAY)}


def test_events_and_calls_expire_after_ttl_days_and_turns_never(dynamo: Dynamo) -> None:
    record = turn()
    started = call(record.turn_id)
    dynamo.stores.turns.create_turn(record)
    dynamo.stores.turns.add_event(record.turn_id, {"type": "started", "at": T0})
    dynamo.stores.turns.start_call(started)
    expires = {"N": str(int(dynamo.clock.now()) + 90 * DAY)}

    [event] = [i for i in dynamo.scan() if i["sk"]["S"].startswith("EVENT#")]
    claimed = dynamo.raw(f"TURN#{record.turn_id}", f"CALL#{started.tool_use_id}")
    stored_turn = dynamo.raw(f"TURN#{record.turn_id}", "TURN")
    assert event is not None and claimed is not None and stored_turn is not None
    assert (event["ttl"], claimed["ttl"]) == (expires, expires)
    assert "ttl" not in stored_turn
    ttl = dynamo.client.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", "ttl")


def test_ttl_days_none_writes_no_ttl(dynamo: Dynamo) -> None:
    stores = open_dynamodb_stores(TABLE, dynamo.clock, client=dynamo.client, ttl_days=None)
    first = item()
    cp = checkpoint(first)
    stores.checkpoints.create(cp)
    stores.checkpoints.replace(transitions.deny(cp, first, None, WHO, T0))
    stores.turns.add_event("turn_1", {"type": "x", "at": T0})

    assert all("ttl" not in found for found in dynamo.scan())


def test_the_table_has_the_key_schema_the_template_declares(dynamo: Dynamo) -> None:
    table = dynamo.client.describe_table(TableName=TABLE)["Table"]

    assert table["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    (index,) = table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == "gsi2"
    assert [k["AttributeName"] for k in index["KeySchema"]] == ["gsi1pk", "gsi1sk"]
    assert index["Projection"] == {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["agent"]}
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


# --- errors, retries, laziness -----------------------------------------------------------------


def test_other_client_errors_become_store_errors_from_the_original(dynamo: Dynamo) -> None:
    from botocore.exceptions import ClientError

    missing = open_dynamodb_stores("no-such-table", dynamo.clock, client=dynamo.client)

    with pytest.raises(StoreError) as failed:
        missing.checkpoints.get("cp_1")

    assert isinstance(failed.value.__cause__, ClientError)
    assert "ResourceNotFoundException" in str(failed.value)


@pytest.fixture
def offline_client() -> Iterator[Any]:
    """A client that can never reach AWS (requests are answered by a botocore Stubber)."""
    with mock.patch.dict(os.environ, FAKE_AWS):
        yield fake_session().client("dynamodb")


def conflict(*codes: str) -> dict[str, Any]:
    """A stubbed TransactionCanceledException with these cancellation reasons."""
    return {
        "service_error_code": "TransactionCanceledException",
        "modeled_fields": {"CancellationReasons": [{"Code": c} for c in codes]},
    }


def test_a_transaction_that_lost_to_another_is_retried(offline_client: Any) -> None:
    from botocore.stub import Stubber

    table = DynamoTable(TABLE, offline_client, max_attempts=3)
    with Stubber(offline_client) as stub:
        stub.add_client_error("transact_write_items", **conflict("TransactionConflict", "None"))
        stub.add_response("transact_write_items", {})
        table.transact([{"ConditionCheck": {"TableName": TABLE, "Key": {}, "ConditionExpression": "x"}}])
        stub.assert_no_pending_responses()


def test_transaction_conflicts_are_retried_a_bounded_number_of_times(offline_client: Any) -> None:
    from botocore.stub import Stubber

    table = DynamoTable(TABLE, offline_client, max_attempts=2)
    with Stubber(offline_client) as stub:
        for _ in range(2):
            stub.add_client_error("transact_write_items", **conflict("TransactionConflict"))
        with pytest.raises(StoreError, match="kept conflicting"):
            table.transact([{"ConditionCheck": {"TableName": TABLE, "Key": {}, "ConditionExpression": "x"}}])
        stub.assert_no_pending_responses()


def test_a_made_client_retries_in_standard_mode_with_a_bound() -> None:
    with mock.patch.dict(os.environ, FAKE_AWS):
        table = DynamoTable(TABLE, max_attempts=4)
        retries = vars(table.client.meta.config)["retries"]  # set by Config.__init__, not in its stubs

    assert retries == {"mode": "standard", "total_max_attempts": 4}


def test_importing_the_adapter_imports_no_aws_sdk() -> None:
    probe = (
        "import sys, loopengine.stores.dynamodb, loopengine.bootstrap; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "[]"


def test_no_client_is_made_until_the_first_request() -> None:
    from moto import mock_aws

    with mock.patch.dict(os.environ, FAKE_AWS), mock_aws():
        stores = open_dynamodb_stores(TABLE, FakeClock())
        assert isinstance(stores.checkpoints, DynamoCheckpointStore)
        table = stores.checkpoints.table
        assert table._client is None

        with pytest.raises(StoreError):  # no table under this fresh mock: but the client exists now
            stores.checkpoints.get("cp_1")

        assert table._client is not None


@given(st.floats(allow_nan=False), st.floats(allow_nan=False))
def test_sortable_keys_order_like_the_numbers(a: float, b: float) -> None:
    if a == b:
        return
    assert (sortable(a) < sortable(b)) == (a < b)
    assert len(sortable(a)) == 16
