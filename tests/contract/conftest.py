"""One contract suite, parametrised by adapter.

An adapter joins the suite by adding one entry to ``ADAPTERS``: a factory that takes a scratch
directory and the clock and is a context manager yielding ready :class:`~loopengine.app.ports.Stores`
(and cleaning up after itself: close connections, stop mocks).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from loopengine.app.ports import Stores
from loopengine.domain.base.clock import FakeClock
from loopengine.stores.dynamodb import create_table, open_dynamodb_stores
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


FAKE_AWS = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


_SESSION: list[Any] = []


def fake_session() -> Any:
    """This process's one boto3 Session, made and first used under :data:`FAKE_AWS`'s credentials.

    The tests make hundreds of clients; from one Session each costs less than from a fresh one
    (which resolves credentials and builds its endpoint resolver again). Its credentials are the
    fake ones, resolved at its first client and kept.
    """
    if not _SESSION:
        import boto3

        with mock.patch.dict(os.environ, FAKE_AWS):
            session = boto3.session.Session(region_name=FAKE_AWS["AWS_DEFAULT_REGION"])
            credentials = session.get_credentials()
            assert credentials is not None and credentials.access_key == FAKE_AWS["AWS_ACCESS_KEY_ID"]
        _SESSION.append(session)
    return _SESSION[0]


_ONE_AT_A_TIME = threading.RLock()
"""Held by the thread whose DynamoDB request moto is applying (every hooked client of the process)."""


def one_request_at_a_time(client: Any) -> Any:
    """``client``, its requests applied one at a time with every other hooked client's; returned.

    DynamoDB applies each request atomically; moto does not (a condition is checked, then the write
    made, and a cancelled transaction puts back a copy of the whole table, undoing what another
    thread wrote meanwhile). So a request holds one process-wide lock from botocore's
    ``before-call`` event until its ``after-call`` (or ``after-call-error``): botocore's own hooks on
    the client, nothing of moto's replaced. Retries of the request stay inside it.
    """
    events = client.meta.events
    events.register_first("before-call.dynamodb", _take, unique_id="tests-one-at-a-time-take")
    events.register_last("after-call.dynamodb", _give, unique_id="tests-one-at-a-time-give")
    events.register_last("after-call-error.dynamodb", _give, unique_id="tests-one-at-a-time-error")
    return client


def _take(**_: Any) -> None:
    _ONE_AT_A_TIME.acquire()


def _give(**_: Any) -> None:
    _ONE_AT_A_TIME.release()


@contextmanager
def moto_dynamodb(table: str = "loopengine-test") -> Iterator[Any]:
    """A low-level DynamoDB client inside ``mock_aws`` with the loopengine table created.

    Fake credentials and region keep every request away from real AWS. The client applies its
    requests one at a time (:func:`one_request_at_a_time`), as DynamoDB applies each atomically; a
    client the code under test makes itself needs the same where threads share the table.
    """
    from moto import mock_aws

    with mock.patch.dict(os.environ, FAKE_AWS), mock_aws():
        client = one_request_at_a_time(fake_session().client("dynamodb"))
        create_table(client, table)
        yield client


INDEX_SHARDS = 4
"""The index shards of :func:`make_dynamodb`'s stores: every reader still merges several shards.

moto answers each Query from the whole table, and a reader Queries every shard: the default 16
would make each index read four times the requests for the same answer. The default count itself
is checked in ``tests/test_dynamodb_index.py`` and ``tests/test_dynamodb_specific.py``.
"""


@contextmanager
def make_dynamodb(tmp: Path, clock: FakeClock) -> Iterator[Stores]:
    """DynamoDB under moto: a fresh table per test, the adapter on a client made for it."""
    with moto_dynamodb() as client:
        yield open_dynamodb_stores("loopengine-test", clock, client=client, index_shards=INDEX_SHARDS)


ADAPTERS: dict[str, StoresFactory] = {"sqlite": make_sqlite, "dynamodb": make_dynamodb}


@pytest.fixture
def clock() -> FakeClock:
    """The suite's clock."""
    return FakeClock()


@pytest.fixture(params=sorted(ADAPTERS))
def stores(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Stores]:
    """Fresh, empty stores of each adapter in turn."""
    with ADAPTERS[request.param](tmp_path, clock) as fresh:
        yield fresh
