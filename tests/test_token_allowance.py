"""A tenant's daily token allowance (LOOPENGINE_TENANT_DAILY_TOKENS), through the HTTP API and the SDK.

A turn that keeps calling its tool runs out of its tenant's allowance part-way: it finishes at its
next step with stopReason ``token_allowance``, everything it recorded stays; a new message of that
tenant is 429 ``token_allowance_exceeded`` with ``Retry-After`` to the next UTC day, another tenant's
is not; the next day the session goes on from where it stood.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.app.invokers import RecordingInvoker
from loopengine.bootstrap import build_runtime
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import ConfigError
from loopengine.domain.messages import check_protocol
from loopengine.domain.tokens.metering import next_day_at
from loopengine.http import api
from loopengine.local.dev import LocalContext, to_event
from loopengine.models.anthropic import AnthropicModel
from loopengine.stores.sqlite import open_sqlite_stores
from tests.handler_support import lambda_context
from tests.harness import Build, Calls, Harness, agent
from tests.window_standin import WindowedMessagesApi

pytestmark = pytest.mark.xdist_group("anthropic-sdk")

USERS = [
    {"user": "alice", "password": "a-pw", "tenants": ["acme"]},
    {"user": "bob", "password": "b-pw", "tenants": ["globex"]},
]
BASIC = {"alice": "alice:a-pw", "bob": "bob:b-pw"}
RULES = {"rules": [{"tool": "lookup", "decision": "allow"}], "default_decision": "ask"}
ALLOWANCE = 3_000


def brain(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Look up again and again (a long turn); a user's "thanks" gets an answer."""
    last = body["messages"][-1]["content"]
    if any(b["type"] == "text" and "thanks" in b["text"] for b in last):
        return [{"type": "text", "text": "You are welcome."}], "end_turn"
    n = sum(1 for m in body["messages"] for b in m["content"] if b["type"] == "tool_use")
    return [{"type": "tool_use", "id": f"toolu_{n:04d}", "name": "lookup", "input": {"x": n}}], "tool_use"


def call(method: str, path: str, caller: str, body: Any = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {"content-type": "application/json"}
    headers["authorization"] = "Basic " + base64.b64encode(BASIC[caller].encode()).decode()
    raw = b"" if body is None else json.dumps(body).encode()
    result = api.handler(to_event(method, path, headers, raw, "127.0.0.1"), lambda_context(LocalContext()))
    answer = {k.lower(): v for k, v in (result.get("headers") or {}).items()}
    return int(result["statusCode"]), json.loads(result["body"] or "{}"), answer


@pytest.fixture
def world(
    install_harness: Build, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Harness, WindowedMessagesApi]]:
    monkeypatch.setenv("LOOPENGINE_USERS", json.dumps(USERS))
    stand_in = WindowedMessagesApi(200_000, brain)
    client = stand_in.client()
    big = Calls()
    tools = [big.tool("lookup", fn=lambda a: {"x": a["x"], "record": "order line " * 40})]
    h = install_harness(agent("shop", tools, RULES, max_iterations=50), model=AnthropicModel(client))
    h.engine.rt.tenant_daily_tokens = ALLOWANCE
    yield h, stand_in
    client.close()


def test_past_its_allowance_a_tenant_stops_at_the_next_step_and_waits_for_the_next_day(
    world: tuple[Harness, WindowedMessagesApi],
) -> None:
    h, stand_in = world
    status, out, _ = call("POST", "/agents/shop/messages", "alice", {"message": "look everything up"})
    assert (status, out["status"], out["stopReason"]) == (200, "finished", "token_allowance")
    used = sum(u["input_tokens"] + u["output_tokens"] for u in stand_in.usage)
    assert used >= ALLOWANCE and 2 <= len(stand_in.usage) < 50, "it stopped part-way, once past"
    last = stand_in.usage[-1]
    assert used - last["input_tokens"] - last["output_tokens"] < ALLOWANCE, "and not before"
    _, turn, _ = call("GET", f"/turns/{out['turnId']}", "alice")
    assert turn["usage"]["modelCalls"] == len(stand_in.usage)
    history = h.engine.history(out["sessionId"], tenant="acme")
    check_protocol(history)
    assert history[-1].tool_results, "every call it made has its result: nothing recorded is lost"

    status, refused, headers = call(
        "POST", "/agents/shop/messages", "alice", {"message": "thanks", "sessionId": out["sessionId"]}
    )
    assert (status, refused["error"]) == (429, "token_allowance_exceeded")
    assert int(headers["retry-after"]) == int(next_day_at(h.clock.now()) - h.clock.now())
    assert call("POST", "/agents/shop/messages", "bob", {"message": "thanks"})[0] == 200, (
        "another tenant goes on"
    )

    h.clock.advance(int(headers["retry-after"]))  # the next UTC day
    status, later, _ = call(
        "POST", "/agents/shop/messages", "alice", {"message": "thanks", "sessionId": out["sessionId"]}
    )
    assert (status, later["stopReason"], later["text"]) == (200, "end_turn", "You are welcome.")
    check_protocol(h.engine.history(out["sessionId"], tenant="acme"))


@pytest.mark.parametrize(("value", "expected"), [("250000", 250_000), ("", None), ("lots", ConfigError)])
def test_the_allowance_is_read_from_the_environment(tmp_path: Path, value: str, expected: Any) -> None:
    stores = open_sqlite_stores(str(tmp_path / "env.db"), FakeClock())
    env = {"LOOPENGINE_MODEL": "scripted", "LOOPENGINE_TENANT_DAILY_TOKENS": value}
    try:
        if expected is ConfigError:
            with pytest.raises(ConfigError, match="LOOPENGINE_TENANT_DAILY_TOKENS"):
                build_runtime(env, invoker=RecordingInvoker(), stores=stores)
        else:
            assert (
                build_runtime(env, invoker=RecordingInvoker(), stores=stores).tenant_daily_tokens == expected
            )
    finally:
        stores.close()
