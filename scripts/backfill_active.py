"""Give every unfinished turn its ``ACTIVE#`` entry (turns stored before those entries existed).

A turn's session lists its unfinished turns under ``ACTIVE#`` entries, created with the turn and
deleted by the write that finishes it (``stores/dynamodb_items.py``); the engine looks there for the
turns in a new message's way and for the next queued message. A turn created by a version before
those entries has none, so during an upgrade a message could start beside an older parked turn.
Run this once after deploying (it is idempotent, and harmless while turns run):

    .venv/bin/python scripts/backfill_active.py --table loopengine-prod [--dry-run]

It Scans the table for turn records (a paginated Scan: the one place the product reads the whole
table, so run it once, not on a schedule) and creates the missing entry of each unfinished turn
under ``attribute_not_exists`` (an entry that exists is left alone; a turn that finishes meanwhile
loses its entry the next time the engine lists it, as for any finished turn's stale entry).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from loopengine.domain.turns import TurnRecord, TurnStatus
from loopengine.stores.dynamodb_codec import s
from loopengine.stores.dynamodb_items import active_key
from loopengine.stores.dynamodb_table import ABSENT, ConditionFailed, DynamoTable


def backfill(table: DynamoTable, *, dry_run: bool = False) -> dict[str, int]:
    """Create the missing ``ACTIVE#`` entries; the counts of what was seen and done."""
    counts = {"turns": 0, "unfinished": 0, "created": 0, "present": 0}
    params: dict[str, Any] = {
        "TableName": table.name,
        "FilterExpression": "sk = :turn AND begins_with(pk, :prefix)",
        "ExpressionAttributeValues": {":turn": s("TURN"), ":prefix": s("TURN#")},
    }
    while True:
        page = table.client.scan(**params)
        for item in page.get("Items", []):
            turn = TurnRecord.from_dict(table.decode(item))
            counts["turns"] += 1
            if turn.status is TurnStatus.FINISHED:
                continue
            counts["unfinished"] += 1
            if dry_run:
                continue
            try:
                table.put({**active_key(turn), "turnId": s(turn.turn_id)}, ABSENT)
                counts["created"] += 1
            except ConditionFailed:
                counts["present"] += 1
        if "LastEvaluatedKey" not in page:
            return counts
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--table NAME [--dry-run]``; prints the counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, help="the DynamoDB table (LOOPENGINE_TABLE)")
    parser.add_argument("--dry-run", action="store_true", help="count, create nothing")
    args = parser.parse_args(argv)
    counts = backfill(DynamoTable(args.table, None), dry_run=args.dry_run)
    seen = f"{counts['turns']} turn(s), {counts['unfinished']} unfinished"
    if args.dry_run:
        print(f"{seen}: would create up to {counts['unfinished']} ACTIVE# entries")
    else:
        print(f"{seen}: created {counts['created']} ACTIVE# entries, {counts['present']} already there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
