"""An installed engine on SQLite or DynamoDB (moto) for the input-hygiene tests, and a raw store dump.

The agent ``shop`` has ``issue_refund`` (denied by rule when ``amount gt 10000``, otherwise asks a
human) and answers a message containing "question" by asking the user. Resumes run inline, so any
bad input that got through would run the tool at once: ``calls`` would show it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopengine.app.engine import Engine
from loopengine.app.invokers import InlineInvoker
from loopengine.app.ports import ModelRequest, ModelResponse, Stores
from loopengine.app.runtime import Runtime
from loopengine.authoring.tools import ASK_USER
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.messages import ToolResultBlock
from loopengine.http import api, root
from loopengine.models.scripted import ScriptedModel, call, say, use
from loopengine.stores.dynamodb import open_dynamodb_stores
from loopengine.stores.sqlite import open_sqlite_stores
from tests.contract.conftest import INDEX_SHARDS, moto_dynamodb
from tests.handler_support import call as http
from tests.handler_support import load_event, with_body
from tests.harness import Calls, RecordingNotifier, StaticAgents, agent

TABLE = "loopengine-edge-test"
STORES = ("sqlite", "dynamodb")
REFUND_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "number"},
        "reason": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["order_id", "amount", "reason"],
    "additionalProperties": False,
}
REFUND = {"order_id": "A-1001", "amount": 212.0, "reason": "arrived broken"}
RULES = {
    "rules": [
        {"tool": "issue_refund", "when": {"field": "amount", "op": "gt", "value": 10000}, "decision": "deny"}
    ],
    "default_decision": "ask",
}


def _responder(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if "question" in last.text:
        return call(use(ASK_USER, {"question": "Which order?"}))
    if last.text:  # a new message (it may carry the results of a superseded turn too)
        return call(use("issue_refund", REFUND))
    assert any(isinstance(b, ToolResultBlock) for b in last.content)
    return say("done")


@dataclass
class Edge:
    """The installed engine, its tool-call log and a way to dump every stored record."""

    engine: Engine
    calls: Calls
    store: str
    client: Any = None
    db_path: str = ""

    def dump(self) -> list[str]:
        """Every stored record, sorted (what "no state change" is checked against)."""
        if self.store == "dynamodb":
            pages = self.client.get_paginator("scan").paginate(TableName=TABLE)
            items = (i for page in pages for i in page["Items"])
            return sorted(json.dumps(i, sort_keys=True, default=_binary) for i in items)
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return sorted(
                json.dumps([table, *row], default=repr)
                for table in tables
                for row in conn.execute(f'SELECT * FROM "{table}"')  # table names from sqlite_master
            )
        finally:
            conn.close()

    def open_ids(self) -> set[str]:
        """The pendingIds of every open item."""
        return {i["pendingId"] for i in self.engine.open_items()}


@contextmanager
def _stores(store: str, tmp: Path, clock: FakeClock) -> Iterator[tuple[Stores, Any, str]]:
    if store == "sqlite":
        path = str(tmp / "edge.db")
        stores = open_sqlite_stores(path, clock)
        try:
            yield stores, None, path
        finally:
            stores.close()
        return
    with moto_dynamodb(TABLE) as client:
        stores = open_dynamodb_stores(TABLE, clock, client=client, index_shards=INDEX_SHARDS)
        try:
            yield stores, client, ""
        finally:
            stores.close()


@contextmanager
def installed(store: str, tmp: Path) -> Iterator[Edge]:
    """The ``shop`` agent on ``store``, installed for the api handler (uninstalled afterwards)."""
    calls = Calls()
    config = agent("shop", [calls.tool("issue_refund", REFUND_SCHEMA), calls.tool("lookup")], RULES)
    notifier = RecordingNotifier()
    model = ScriptedModel(_responder)
    with _stores(store, tmp, FakeClock()) as (stores, client, path):
        invoker = InlineInvoker()
        rt = Runtime(
            stores=stores,
            agents=StaticAgents(config),
            model_for=lambda _c: model,
            notifier_for=lambda _c: notifier,
            invoker=invoker,
            public_url="http://test.invalid",
        )
        engine = Engine(rt)
        invoker.resume = engine.resume
        root.install(engine)
        try:
            yield Edge(engine, calls, store, client, path)
        finally:
            root.install(None)


def message_event(body: Any) -> dict[str, Any]:
    """POST /agents/shop/messages with ``body`` (a str is sent as is)."""
    event = load_event("post_message")
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/agents/shop/messages"
    return with_body(event, body)


def send(body: Any) -> tuple[int, dict[str, Any]]:
    """POST a message to ``shop``."""
    return http(api.handler, message_event(body))


def pause(text: str = "refund A-1001", **extra: Any) -> dict[str, Any]:
    """A turn paused on one item (an approval; a question when ``text`` says "question")."""
    status, body = send({"message": text, **extra})
    assert status == 202 and body["status"] == "paused", body
    return body


def _binary(value: object) -> str:
    """A binary attribute (a compressed body) in the dump: its bytes as hex."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    raise TypeError(f"{type(value).__name__} in a stored item")
