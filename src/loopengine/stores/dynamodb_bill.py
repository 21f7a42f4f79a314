"""The DynamoDB store's part of the model bill: daily usage counters and session compactions.

Items (see :mod:`~loopengine.stores.dynamodb_items` for the rest of the key schema):

==================  ============================  ===============  ==================================
item                pk                            sk               other attributes
==================  ============================  ===============  ==================================
usage counter       ``USAGE#<tenant>#<n>``         ``<day>#<agent>``  the four counts and ``model_calls``
                                                                   (numbers, added to with ``ADD``)
latest compaction   ``SESSION#<sid>``             ``MSG#~C``       body: the compaction (overwritten)
compaction marker   ``SESSION#<sid>``             ``CMP#<upTo:010d>`` body: the compaction (kept)
==================  ============================  ===============  ==================================

A counter is one of ``shards`` (``LOOPENGINE_INDEX_SHARDS``) per tenant, picked by a hash of the turn
id: a tenant's busy day spreads over that many partitions, and ``GET /usage`` adds them up. It is
added to in the transaction of the pause or finish that counts a turn's usage (an ``Update`` with
``ADD``: no read).

The latest compaction's key sorts after every message key (``~`` after the digits), so one Query of
the session's ``MSG#`` keys from the end reads it first and then the messages newest first, and stops
at the compaction's ``upTo``: a step reads what came since the latest compaction, however old the
session. The ``CMP#`` markers are read only by ``GET /sessions/{id}``.
"""

from __future__ import annotations

import itertools

from loopengine.app.ports import Compact
from loopengine.domain.messages import Message
from loopengine.domain.tokens.context_window import Compaction, History
from loopengine.domain.tokens.metering import PACKED, DailyUsage, Metered, Tally
from loopengine.domain.tokens.usage import Usage
from loopengine.stores.dynamodb_codec import Item, key, n, shard_of
from loopengine.stores.dynamodb_table import DynamoTable

LATEST = "MSG#~C"
"""The sort key of a session's latest compaction: after every ``MSG#<seq>``."""
MARKER = "CMP#"
PAGE = 64
"""Items per page of the backwards read of a session (the first page is most steps' whole read)."""
Action = dict[str, object]


def tally_action(table: DynamoTable, tally: Tally) -> Action:
    """Add ``tally`` to its counter (created at zero by ``ADD`` if absent)."""
    values = tally.metered.packed()
    names = {f"#c{i}": name for i, name in enumerate(PACKED)}
    adds = ", ".join(f"#c{i} :c{i}" for i in range(len(PACKED)))
    pk = f"USAGE#{tally.tenant}#{shard_of(tally.turn_id, table.shards)}"
    return {
        "Update": {
            "TableName": table.name,
            "Key": key(pk, f"{tally.day}#{tally.agent}"),
            "UpdateExpression": f"ADD {adds}",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {f":c{i}": n(v) for i, v in enumerate(values)},
        }
    }


def daily_usage(table: DynamoTable, tenant: str, day: str, agent: str | None) -> list[DailyUsage]:
    """The counters of ``tenant`` on ``day`` (of ``agent`` alone, if given), shards added up, by agent."""
    pks = [f"USAGE#{tenant}#{i}" for i in range(table.shards)]
    if agent is not None:  # known keys: one BatchGetItem
        items = table.batch_get([key(pk, f"{day}#{agent}") for pk in pks])
    else:
        items = [item for pk in pks for item in table.query(pk, f"{day}#")]
    by_agent: dict[str, Metered] = {}
    for item in items:
        name = item["sk"]["S"].removeprefix(f"{day}#")
        i, o, w, r, calls = (int(item.get(c, {}).get("N", "0")) for c in PACKED)
        by_agent[name] = by_agent.get(name, Metered()) + Metered(Usage(i, o, w, r), calls)
    return [DailyUsage(tenant, name, day, by_agent[name]) for name in sorted(by_agent)]


def compact_keys(compact: Compact) -> list[tuple[str, str]]:
    """Where a compaction is stored: the session's latest, and its kept marker."""
    pk = f"SESSION#{compact.session_id}"
    return [(pk, LATEST), (pk, f"{MARKER}{compact.compaction.up_to:010d}")]


def read_since_compaction(table: DynamoTable, session_id: str) -> History:
    """The latest compaction and the messages from its ``upTo`` on: one Query, two when it is long.

    The first page (:data:`PAGE` items, newest first) brings the latest compaction, if any, and the
    newest messages; when they do not reach back to its ``upTo`` (or, never compacted, to the start),
    one more Query reads exactly the keys in between. Message items hold the messages from their
    ``seq`` on (one each, unless one append brought many).
    """
    pk = f"SESSION#{session_id}"
    newest = itertools.islice(table.query(pk, "MSG#", ScanIndexForward=False, Limit=PAGE), PAGE)
    compaction: Compaction | None = None
    groups: dict[int, list[Message]] = {}
    read = 0
    for item in newest:
        read += 1
        if item["sk"]["S"] == LATEST:
            compaction = Compaction.from_dict(table.decode(item))
        else:
            groups[_seq(item)] = [Message.from_dict(m) for m in table.decode(item)]
    start = compaction.up_to if compaction is not None else 0
    oldest = min(groups, default=0)
    if read == PAGE and oldest > start:  # the rest, from the compaction (or the start) on
        older = table.query(pk, between=(_sk(start), _sk(oldest - 1)))
        groups.update({_seq(i): [Message.from_dict(m) for m in table.decode(i)] for i in older})
        if start and min(groups) > start:  # one append's item holds the compaction's first message
            before = next(
                iter(table.query(pk, below=_sk(min(groups)), ScanIndexForward=False, Limit=1)), None
            )
            if before is not None and before["sk"]["S"].startswith("MSG#"):
                groups[_seq(before)] = [Message.from_dict(m) for m in table.decode(before)]
    messages = [m for seq in sorted(groups) for i, m in enumerate(groups[seq], seq) if i >= start]
    return History(messages, start, compaction)


def _seq(item: Item) -> int:
    return int(item["sk"]["S"].removeprefix("MSG#"))


def _sk(seq: int) -> str:
    return f"MSG#{seq:010d}"


def read_markers(table: DynamoTable, session_id: str) -> list[Compaction]:
    """Every compaction of the session, oldest first."""
    return [Compaction.from_dict(table.decode(i)) for i in table.query(f"SESSION#{session_id}", MARKER)]
