"""moto's TransactWriteItems, with one rollback copy of a table per transaction instead of one per item.

Before it applies a transaction, moto deep-copies the whole table once for each item the transaction
names (``DynamoDBBackend.transact_write_items``), to put the table back if the transaction is
cancelled. Every one of those copies is taken before the first write, from the same unchanged table,
and only the last is kept. :func:`one_rollback_copy` hands moto the first copy again for the others:
the same table, the same rollback, a third of the copying (a transaction here names three items on
average; the copies were about a tenth of the suite's DynamoDB time).

Nothing else about moto changes; ``tests/test_moto_rollback.py`` checks that a cancelled
transaction still leaves the table as it was.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_COPIES: ContextVar[dict[int, Any] | None] = ContextVar("moto_rollback_copies", default=None)
"""The copies made so far by the transaction this context is in (by the id of the table copied)."""


def _table_deepcopy(table: Any, memo: dict[int, Any]) -> Any:
    """``copy.deepcopy(table)``: the copy made earlier in this transaction, if any, else a new one."""
    copies = _COPIES.get()
    if copies is not None and id(table) in copies:
        return copies[id(table)]
    made = copy._reconstruct(table, memo, *table.__reduce_ex__(4))  # type: ignore[attr-defined]
    if copies is not None:
        copies[id(table)] = made
    return made


@contextmanager
def one_rollback_copy() -> Iterator[None]:
    """Within: moto's transactions copy each table they name once (see the module's docstring)."""
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    real = DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        token = _COPIES.set({})
        try:
            real(self, transact_items)
        finally:
            _COPIES.reset(token)

    had = "__deepcopy__" in vars(Table)
    Table.__deepcopy__ = _table_deepcopy  # type: ignore[attr-defined]
    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    try:
        yield
    finally:
        DynamoDBBackend.transact_write_items = real  # type: ignore[method-assign]
        if not had:
            del Table.__deepcopy__  # type: ignore[attr-defined]
