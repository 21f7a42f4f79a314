"""The busiest DynamoDB partition's write rate at a given turn rate, from a metered trace.

A *cycle* is the common scenario (``bench.dynamodb_requests.run_flow``: message -> pause on
``issue_refund`` -> approve -> pause on ``send_email`` -> approve -> finish). The trace is each
phase's write units by partition key (``bench.meter.Meter.report()["partition_wru"]``; index
partitions are prefixed with the index's name, ``gsi2:``). Partitions named after a turn,
session, checkpoint or pending item are new in every cycle, so their load does not add up across
cycles; the shared ones (the index partitions ``DUE#<n>``, ``OUTBOX#<n>``, ``OPEN#<tenant>#<n>``,
the tenant's usage counters ``USAGE#<tenant>#<n>`` and the agent's ``CONFIG#<hash>``) take every
cycle's writes. A shared partition whose key ends in ``#<n>`` is one of ``--shards`` shards
(``LOOPENGINE_INDEX_SHARDS``, default 16; twice that for ``DUE`` and ``OUTBOX``, which only the
sweep reads) that share the load evenly (each record's shard is a hash of its id).

    .venv/bin/python scripts/partition_rate.py                 # meter a cycle under moto, 1000/s
    .venv/bin/python scripts/partition_rate.py --webhook       # ... with a webhook taking every event
    .venv/bin/python scripts/partition_rate.py --rate 250 --shards 4 --trace trace.json --json

Compared with the on-demand limit of one partition: 1,000 write units a second.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loopengine.stores.dynamodb_index import shards_of
from loopengine.stores.dynamodb_table import DEFAULT_SHARDS

PARTITION_WRU = 1000
"""Write units a second one DynamoDB partition takes before it throttles."""
SHARDS = DEFAULT_SHARDS
"""``LOOPENGINE_INDEX_SHARDS``'s default."""
_SHARED = re.compile(r"^(gsi\d+:.*|CONFIG#.*|USAGE#.*)$")
_INDEX = re.compile(r"^(gsi\d+:|USAGE#)")
_SHARD = re.compile(r"^(?P<family>.+)#(?P<n>\d+)$")


@dataclass(frozen=True)
class Partition:
    """One partition's write load at the given cycle rate."""

    key: str
    wru_per_cycle: float
    wru_per_second: float
    share_of_limit: float


def per_cycle(trace: dict[str, Any]) -> Counter[str]:
    """Write units per partition over all phases of one cycle."""
    total: Counter[str] = Counter()
    for phase in trace.values():
        if isinstance(phase, dict):
            total.update(phase.get("partition_wru", {}))
    return total


def load(trace: dict[str, Any], rate: float, shards: int = SHARDS) -> list[Partition]:
    """Every partition's write rate at ``rate`` cycles a second, busiest first.

    A shared partition gets ``rate`` times its units per cycle; an index shard's (``<family>#<n>``)
    are its family's, divided over ``shards`` (one cycle's records land on a few shards, many
    cycles' on all of them alike). One of a cycle's own partitions gets its units once per cycle
    (one cycle a second each, an upper bound for a cycle that takes longer).
    """
    families: Counter[str] = Counter()
    for key, units in per_cycle(trace).items():
        if not _SHARED.match(key):
            families[key] = units
            continue
        sharded = _SHARD.match(key) if _INDEX.match(key) else None
        family = f"{sharded['family']}#<n>" if sharded else key
        families[family] += units
    out = []
    for key, units in families.items():
        family = key.removeprefix("gsi2:").removesuffix("#<n>")
        spread = shards_of(family, shards) if key.endswith("#<n>") else 1
        per_second = units * rate / spread if _SHARED.match(key) else units
        out.append(Partition(key, units, per_second, per_second / PARTITION_WRU))
    return sorted(out, key=lambda p: -p.wru_per_second)


def metered_trace(webhook: bool = False) -> dict[str, Any]:
    """One steady-state cycle metered now on moto (the second: the first stores the config snapshot).

    ``webhook``: the deployment's default webhook (a local receiver) takes every event.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.dynamodb_requests import metered_stack, run_flow

    from loopengine.channels.webhook.verify import WebhookReceiver

    with WebhookReceiver("partition-rate") as receiver:
        env = {
            "LOOPENGINE_DEFAULT_WEBHOOK_URL": receiver.url,
            "LOOPENGINE_DEFAULT_WEBHOOK_SECRET": "partition-rate",
        }
        with metered_stack(env=env if webhook else None) as (engine, meter, invoker, _client):
            run_flow(engine, meter, invoker, None)
            return run_flow(engine, meter, invoker, None)


def main(argv: list[str] | None = None) -> int:
    """Print the busiest partitions; exit 1 when the busiest is past half a partition's limit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="cycles a second (default 1000)")
    parser.add_argument(
        "--shards", type=int, default=SHARDS, help=f"index shards (LOOPENGINE_INDEX_SHARDS, default {SHARDS})"
    )
    parser.add_argument("--trace", type=Path, help="a metered trace (JSON); default: meter one now")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--webhook", action="store_true", help="a webhook takes every event")
    args = parser.parse_args(argv)
    trace = json.loads(args.trace.read_text()) if args.trace else metered_trace(args.webhook)
    rows = load(trace, args.rate, args.shards)
    if args.json:
        print(json.dumps([asdict(r) for r in rows[:5]], indent=2))
    else:
        print(f"{'partition':<40} {'WRU/cycle':>10} {'WRU/s':>10} {'of limit':>9}")
        for row in rows[:5]:
            name = row.key if len(row.key) <= 40 else row.key[:37] + "..."
            units = f"{row.wru_per_cycle:>10.0f} {row.wru_per_second:>10.0f}"
            print(f"{name:<40} {units} {row.share_of_limit:>9.1%}")
    return 0 if rows and rows[0].share_of_limit < 0.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
