"""One contract suite, parametrised by adapter.

An adapter joins the suite by adding one entry to ``ADAPTERS``: a factory that takes a scratch
directory and the clock and is a context manager yielding ready :class:`~loopengine.ports.Stores`
(and cleaning up after itself: close connections, stop mocks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from loopengine.clock import FakeClock
from loopengine.ports import Stores
from loopengine.stores.sqlite import SqliteDatabase, sqlite_stores

StoresFactory = Callable[[Path, FakeClock], AbstractContextManager[Stores]]


@contextmanager
def make_sqlite(tmp: Path, clock: FakeClock) -> Iterator[Stores]:
    """SQLite on a file under ``tmp`` (in a directory the adapter has to create)."""
    db = SqliteDatabase(str(tmp / "store" / "loopengine.db"))
    try:
        yield sqlite_stores(db, clock)
    finally:
        db.close()


ADAPTERS: dict[str, StoresFactory] = {"sqlite": make_sqlite}


@pytest.fixture
def clock() -> FakeClock:
    """The suite's clock."""
    return FakeClock()


@pytest.fixture(params=sorted(ADAPTERS))
def stores(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Stores]:
    """Fresh, empty stores of each adapter in turn."""
    with ADAPTERS[request.param](tmp_path, clock) as fresh:
        yield fresh
