"""The operator's list of turns on DynamoDB: a Scan of the sessions' turn entries, then their heads.

No index lists turns by status, agent, tenant or age (the sweep's index holds only what is due), so
``loopengine admin turns`` reads the table once: a paginated Scan for the ``TURN#`` entries each
session keeps of its turns (``SESSION#<sid>`` / ``TURN#<t createdAt>#<tid>``, with ``turnId``,
``tenant`` and ``agent``), narrowed by a FilterExpression on those and on the creation time in the
sort key, then a consistent BatchGetItem of the matching turns' heads, whose status and stop reason
are checked here. A Scan reads (and is billed for) every item of the table, whatever the filter
keeps: an operator's tool, never a request path's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from loopengine.domain.turns import TurnQuery, TurnRecord
from loopengine.stores.dynamodb_codec import Item, key, s, sortable
from loopengine.stores.dynamodb_table import DynamoTable, _errors


def turn_entries(table: DynamoTable, query: TurnQuery) -> Iterator[Item]:
    """Every session's ``TURN#`` entry that ``query``'s tenant, agent and ``since`` let through."""
    condition = ["begins_with(#sk, :turn)"]
    names = {"#sk": "sk"}
    values: dict[str, Any] = {":turn": s("TURN#")}
    if query.since is not None:
        condition.append("#sk >= :from")
        values[":from"] = s(f"TURN#{sortable(max(query.since, 0.0))}")
    for field, wanted in (("tenant", query.tenant), ("agent", query.agent)):
        if wanted is not None:  # an entry from before entries named them: its head is checked
            condition.append(f"(attribute_not_exists(#{field}) OR #{field} = :{field})")
            names[f"#{field}"], values[f":{field}"] = field, s(wanted)
    params: dict[str, Any] = {
        "TableName": table.name,
        "FilterExpression": " AND ".join(condition),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }
    while True:
        with _errors("Scan"):
            page = table.client.scan(**params)
        yield from (i for i in page.get("Items", []) if str(i["pk"]["S"]).startswith("SESSION#"))
        if "LastEvaluatedKey" not in page:
            return
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def list_turns(
    table: DynamoTable, query: TurnQuery, turn_of: Callable[[Item], TurnRecord]
) -> list[TurnRecord]:
    """The turns ``query`` matches, newest first, at most ``query.limit`` (see the module docstring).

    ``turn_of``: the turn a stored head holds (the turn store's parser).
    """
    ids = {str(i["turnId"]["S"]) for i in turn_entries(table, query) if "turnId" in i}
    heads = table.batch_get([key(f"TURN#{turn_id}", "TURN") for turn_id in sorted(ids)])
    turns = [t for t in map(turn_of, heads) if query.matches(t)]
    turns.sort(key=lambda t: (t.created_at, t.turn_id), reverse=True)
    return turns[: query.limit]
