"""The three store ports on SQLite (the embedded default): the adapters, the database, the bill.

What callers use is exported here: :func:`open_sqlite_stores` (a path and a clock) and the pieces
an application plugs together itself (docs/python.md "Plugging in a store").
"""

from loopengine.stores.sqlite.adapters import (
    SqliteCheckpointStore,
    SqliteSessionStore,
    SqliteTurnStore,
    open_sqlite_stores,
    sqlite_stores,
)
from loopengine.stores.sqlite.database import SqliteDatabase

__all__ = [
    "SqliteCheckpointStore",
    "SqliteDatabase",
    "SqliteSessionStore",
    "SqliteTurnStore",
    "open_sqlite_stores",
    "sqlite_stores",
]
