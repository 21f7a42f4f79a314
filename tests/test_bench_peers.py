"""The peers bench (bench/peers/, bench/scenario.py, bench/meter.py): counts, never times.

- the Meter prices each DynamoDB operation with DynamoDB's arithmetic, on a real boto3 client under moto;
- ``common_cycle`` runs the common scenario phase by phase and meters what the table really holds;
- run.py's table, dollars and drift logic on canned results;
- (slow) the LangGraph side in its own environment, skipped with the reason when it cannot be built.
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from bench import scenario
from bench.agents.refund_cycle import script as bench_script
from bench.meter import Meter, _size
from bench.peers import run, venv
from moto import mock_aws

from tests.contract.conftest import fake_session

ROOT = Path(__file__).resolve().parent.parent
DASH = run.DASH
FAKE = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t"}


# -- the Meter on a real client ----------------------------------------------------------------------


@pytest.fixture
def dynamo() -> Iterator[tuple[Any, Meter]]:
    """A PK/SK table (LangGraph's saver's shape) on moto, its client metered."""
    with mock.patch.dict(os.environ, FAKE), mock_aws():
        client = fake_session().client("dynamodb")  # one Session: botocore's data parsed once
        client.create_table(
            TableName="t",
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": "PK", "AttributeType": "S"},
                {"AttributeName": "SK", "AttributeType": "S"},
            ],
            KeySchema=[
                {"AttributeName": "PK", "KeyType": "HASH"},
                {"AttributeName": "SK", "KeyType": "RANGE"},
            ],
        )
        meter = Meter(key=("PK", "SK"), index_key=None)
        meter.attach(client)
        yield client, meter


def _item(pk: str, sk: str, kb: float) -> dict[str, Any]:
    body = "x" * int(kb * 1024 - len("PKSKbody") - len(pk) - len(sk))
    return {"PK": {"S": pk}, "SK": {"S": sk}, "body": {"S": body}}


def test_puts_and_deletes_are_billed_on_the_item_size(dynamo: tuple[Any, Meter]) -> None:
    client, meter = dynamo
    client.put_item(TableName="t", Item=_item("a", "1", 2.5))
    assert meter.wru == 3  # 2.5 KB -> 3 WRU
    meter.clear()
    client.delete_item(TableName="t", Key={"PK": {"S": "a"}, "SK": {"S": "1"}})
    assert meter.wru == 3  # the deleted item's size, not one unit
    assert meter.sizes == {}


def test_update_item_bills_the_larger_image_and_hands_back_what_the_caller_asked(
    dynamo: tuple[Any, Meter],
) -> None:
    client, meter = dynamo
    client.put_item(TableName="t", Item=_item("a", "1", 1.5))
    meter.clear()
    answer = client.update_item(
        TableName="t",
        Key={"PK": {"S": "a"}, "SK": {"S": "1"}},
        UpdateExpression="SET extra = :v",
        ExpressionAttributeValues={":v": {"S": "y" * 3000}},
    )
    assert "Attributes" not in answer  # the meter asked for ALL_NEW; the caller asked for nothing
    assert meter.wru == 5  # 1.5 KB + 3 KB after: 5 WRU
    meter.clear()
    client.update_item(
        TableName="t",
        Key={"PK": {"S": "a"}, "SK": {"S": "1"}},
        UpdateExpression="REMOVE extra",
    )
    assert meter.wru == 5  # the larger of before (4.5 KB) and after (1.5 KB)
    mine = client.update_item(
        TableName="t",
        Key={"PK": {"S": "a"}, "SK": {"S": "1"}},
        UpdateExpression="SET n = :n",
        ExpressionAttributeValues={":n": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )
    assert mine["Attributes"]["n"] == {"N": "1"}  # a caller's own ReturnValues is untouched


def test_reads_eventual_at_half_batch_get_per_item_and_a_miss_at_the_minimum(
    dynamo: tuple[Any, Meter],
) -> None:
    client, meter = dynamo
    for sk in ("1", "2"):
        client.put_item(TableName="t", Item=_item("a", sk, 5))  # 5 KB: 2 read units strongly
    meter.clear()
    client.get_item(TableName="t", Key={"PK": {"S": "a"}, "SK": {"S": "1"}})
    assert meter.rru == 1.0  # eventually consistent: half of 2
    client.get_item(TableName="t", Key={"PK": {"S": "a"}, "SK": {"S": "1"}}, ConsistentRead=True)
    assert meter.rru == 3.0
    meter.clear()
    keys = [{"PK": {"S": "a"}, "SK": {"S": sk}} for sk in ("1", "2", "missing")]
    client.batch_get_item(RequestItems={"t": {"Keys": keys, "ConsistentRead": True}})
    assert meter.rru == 2 + 2 + 1 and meter.items_read == 2
    meter.clear()
    client.query(
        TableName="t", KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {"S": "a"}}
    )
    assert meter.rru == 1.5  # 10 KB summed, then rounded once (3 units), eventually consistent
    meter.clear()
    client.scan(TableName="t")
    assert meter.rru == 1.5 and meter.requests == {"Scan": 1}


def test_a_projected_read_is_billed_on_the_whole_item(dynamo: tuple[Any, Meter]) -> None:
    """LangGraph's saver lists checkpoints with ``ProjectionExpression="SK"``: no key comes back."""
    client, meter = dynamo
    for sk in ("1", "2"):
        client.put_item(TableName="t", Item=_item("a", sk, 5))
    meter.clear()
    client.query(
        TableName="t",
        KeyConditionExpression="#p = :p",
        ExpressionAttributeNames={"#p": "PK"},
        ExpressionAttributeValues={":p": {"S": "a"}},
        ProjectionExpression="SK",
    )
    assert meter.rru == 1.5  # 10 KB of items read, not the few bytes of SK returned
    meter.clear()
    client.get_item(TableName="t", Key={"PK": {"S": "a"}, "SK": {"S": "1"}}, ProjectionExpression="body")
    assert meter.rru == 1.0


def test_batch_write_deletes_and_transactions_with_condition_checks(dynamo: tuple[Any, Meter]) -> None:
    client, meter = dynamo
    client.batch_write_item(
        RequestItems={"t": [{"PutRequest": {"Item": _item("a", str(i), 1.2)}} for i in range(3)]}
    )
    assert meter.wru == 6
    meter.clear()
    deletes = [{"DeleteRequest": {"Key": {"PK": {"S": "a"}, "SK": {"S": str(i)}}}} for i in range(2)]
    client.batch_write_item(RequestItems={"t": deletes})
    assert meter.wru == 4  # each deleted 1.2 KB item: 2 WRU
    meter.clear()
    client.transact_write_items(
        TransactItems=[
            {
                "ConditionCheck": {
                    "TableName": "t",
                    "Key": {"PK": {"S": "a"}, "SK": {"S": "2"}},
                    "ConditionExpression": "attribute_exists(PK)",
                }
            },
            {"Put": {"TableName": "t", "Item": _item("b", "1", 0.5)}},
        ]
    )
    assert meter.wru == 2 * 2 + 2 * 1  # twice the single write: the checked 1.2 KB item, the 0.5 KB put
    assert meter.partition_wru == {"a": 4, "b": 2}


# -- the loopengine side -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def steady() -> dict[str, Any]:
    """One steady-state cycle, and what the meter saw against what the table holds afterwards (a Scan)."""
    with scenario.scenario_engine() as bench:
        scenario.run_cycle(bench)
        cycle = scenario.run_cycle(bench)
        items = bench.client.scan(TableName=scenario.TABLE)["Items"]
        return {
            "cycle": cycle,
            "scanned": (len(items), sum(_size(i) for i in items)),
            "metered": (len(bench.meter.sizes), scenario.stored_bytes(bench.meter)),
        }


def test_common_cycle_meters_each_phase(steady: dict[str, Any]) -> None:
    cycle = steady["cycle"]
    assert list(cycle["phases"]) == list(scenario.PHASES)
    for name, phase in cycle["phases"].items():
        assert phase["requests"] == sum(phase["by_operation"].values()) > 0, name
        assert phase["wru"] >= 1 and phase["rru"] >= 0, name  # every phase writes; a step may read nothing
    assert cycle["totals"]["requests"] == sum(p["requests"] for p in cycle["phases"].values())
    assert cycle["totals"]["wru"] == sum(p["wru"] for p in cycle["phases"].values())
    assert cycle["tool_runs"] == {"issue_refund": 1, "lookup_order": 1}
    assert cycle["bytes_per_pause"] > 1000  # the paused turn, its checkpoint and session entries


CYCLE_WRU = 44
"""Write units of a steady common cycle: issue 13's budget (measured: 39), and since issue 27 the
per-day usage counters and the usage on model_response events (measured: 43).

66 before bodies over 400 bytes were stored compressed (the decided checkpoint, 1.3 KB of JSON,
cost 2 units a write); 62 before a transition's events, claims and outcomes rode in the turn's
head (one event item and one call item each, every one billed twice in a transaction) and
bodies were compressed with a preset dictionary."""


def test_the_common_cycle_writes_no_more_units_than_it_did(steady: dict[str, Any]) -> None:
    assert steady["cycle"]["totals"]["wru"] <= CYCLE_WRU, steady["cycle"]["totals"]
    assert steady["cycle"]["totals"]["rru"] <= 6, steady["cycle"]["totals"]


def test_the_meter_saw_every_item_the_table_holds(steady: dict[str, Any]) -> None:
    """Fails when the meter is not attached to the stores' client, or misses a kind of write."""
    (count, size) = steady["scanned"]
    metered_count, metered_size = steady["metered"]
    assert metered_count == count and count > 0
    # a usage counter's ADD is sized from its increment (a transaction returns no item): its total's
    # digits may differ by a byte or two per counter, nothing more
    assert abs(metered_size - size) <= 4 * 2, (metered_size, size)


def test_the_scenario_agent_is_the_langgraph_sides() -> None:
    """Same system prompt and call arguments on both sides (the LangGraph file is read, not imported)."""
    tree = ast.parse((ROOT / "bench" / "peers" / "langgraph_cycle.py").read_text())
    consts = {
        t.id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name) and t.id in ("SYSTEM", "LOOKUP", "REFUND", "MESSAGE")
    }
    agent = yaml.safe_load((scenario.AGENTS_DIR / "refund_cycle" / "agent.yaml").read_text())
    assert consts["SYSTEM"] == agent["system"]
    assert consts["MESSAGE"] == scenario.MESSAGE
    assert (consts["LOOKUP"], consts["REFUND"]) == (bench_script.LOOKUP, bench_script.REFUND)


# -- run.py on canned results ------------------------------------------------------------------------


def _canned(
    requests: tuple[int | None, ...], wru: float, rru: float, index: dict[str, float]
) -> dict[str, Any]:
    phases = {
        name: None if count is None else {"requests": count, "by_operation": {"PutItem": count}}
        for name, count in zip(run.PHASES, requests, strict=True)
    }
    totals = {
        "requests": sum(c for c in requests if c),
        "wru": wru,
        "rru": rru,
        "items_read": 5,
        "index_wru": index,
    }
    return {"phases": phases, "totals": totals, "bytes_per_pause": 1500, "tool_runs": {"a": 1, "b": 2}}


OURS = _canned((16, 4, 18), 98, 22, {"gsi1:DUE": 17, "gsi1:OUTBOX": 4})
THEIRS = _canned((23, None, 20), 40, 3.5, {})


def test_dollars_per_million_cycles_at_list_prices() -> None:
    assert run.dollars(THEIRS) == pytest.approx(40 * 0.625 + 3.5 * 0.125)
    assert run.dollars(OURS) == pytest.approx(64.0)


def test_the_side_by_side_table() -> None:
    rows = {row[0]: row[1:] for row in run.comparison(OURS, THEIRS)}
    assert rows["requests (message→pause / resolve / resume→finish)"] == (
        "16 / 4 / 18 = 38",
        f"23 / {DASH} / 20 = 43",
        "0.88x",
    )
    assert rows["write units (table + indexes)"] == ("98 (77 table + 21 gsi1)", "40 (40 table)", "2.45x")
    assert rows["re-executed effects"] == ("1", "1", "1.00x")
    text = run.report({"loopengine": OURS, "langgraph": THEIRS, "growth": {}, "partitions": []})
    assert f"23 / {DASH} / 20 = 43" in text and f"resolve           PutItem    4           {DASH}" in text


def test_a_missing_langgraph_side_is_said_not_hidden() -> None:
    text = run.report({"loopengine": OURS, "langgraph_unavailable": "no network"})
    assert "LangGraph: not run (no network)" in text


def test_drift_flags_only_moves_past_20_percent() -> None:
    before = {"a": 100.0, "b": 10.0, "c": 0.0, "gone": 1.0}
    after = {"a": 121.0, "b": 12.0, "c": 1.0, "new": 5.0}
    assert run.drift(before, after) == ["a: 100 -> 121 (+21%)", "c: 0 -> 1 (+100%)"]
    assert run.drift({"x": 100.0}, {"x": 70.0}) == ["x: 100 -> 70 (-30%)"]


def test_compare_and_write_against_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "peers.json"
    assert run.compare_and_write({"loopengine": OURS, "langgraph": THEIRS}, path) == []
    written = json.loads(path.read_text())
    assert written["figures"]["langgraph requests"] == 43 and written["figures"]["loopengine wru"] == 98
    cheaper = {**OURS, "totals": {**OURS["totals"], "wru": 40}}
    assert "loopengine wru: 98 -> 40 (-59%)" in run.compare_and_write({"loopengine": cheaper}, path)


def test_a_stale_stamp_means_rebuild(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.txt"
    lock.write_text("a==1\n")
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").touch()
    assert not venv.current(env, lock)
    (env / venv.STAMP).write_text(venv._digest(lock))
    assert venv.current(env, lock)
    lock.write_text("a==2\n")
    assert not venv.current(env, lock)


# -- the LangGraph side (its own environment) --------------------------------------------------------


@pytest.mark.slow
def test_the_langgraph_side_runs_the_same_cycle() -> None:
    try:
        python = venv.ensure(progress=lambda _line: None)
    except venv.PeersUnavailable as exc:
        pytest.skip(f".venv-peers cannot be built here: {exc}")
    cycle = run.run_langgraph(python, growth=(0, 10))
    assert list(cycle["phases"]) == list(run.PHASES) and cycle["phases"]["resolve"] is None
    assert (
        cycle["phases"]["message -> pause"]["requests"] > 0 < cycle["phases"]["resume -> finish"]["requests"]
    )
    assert cycle["totals"]["wru"] > 0 and cycle["bytes_per_pause"] > 0
    assert cycle["tool_runs"] == {"issue_refund": 1, "lookup_order": 1}
    assert cycle["tool_entries"]["issue_refund"] == 2  # the resumed node runs again up to interrupt()
    grown = cycle["growth"]
    assert grown["10"]["message -> pause"]["wru"] > grown["0"]["message -> pause"]["wru"]
