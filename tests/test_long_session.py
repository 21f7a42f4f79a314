"""A session outgrowing its window, through the anthropic SDK, against a stand-in refusing as the API does.

Issue 27's scenario: an agent with a long system prompt (45 policy clauses) and three tools, one
session in which every turn looks an order up (an allowed tool returning about 600 tokens) and
answers. With a 16,000-token window the session used to die at turn 14 ("prompt is too long"); here
40 turns must all finish ``end_turn`` with no request refused, every request's tool protocol whole,
compactions rare, nothing lost from the session, and every token the stand-in billed recorded on the
turns, the session and the tenant's day.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from loopengine.app.engine import Engine
from loopengine.app.invokers import InlineInvoker
from loopengine.app.ports import Stores
from loopengine.app.runtime import Runtime
from loopengine.app.worker.compaction import SUMMARY_SYSTEM
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.tools import Tool
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.ids import session_key
from loopengine.domain.messages import Message, check_protocol
from loopengine.domain.tokens import context_window as cw
from loopengine.domain.tokens.metering import Metered, day_of
from loopengine.domain.tokens.usage import Usage
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.anthropic import AnthropicModel
from tests.contract.conftest import make_dynamodb, make_sqlite
from tests.harness import RecordingNotifier, StaticAgents, agent
from tests.window_standin import WindowedMessagesApi, count_tokens

pytestmark = pytest.mark.xdist_group("anthropic-sdk")

WINDOW = 16_000
TURNS = 40
CLAUSES = [
    f"{n}. When a customer asks about {topic}, check the order first, quote only what the order record "
    f"says, never promise a date the carrier has not confirmed, and keep the answer under five sentences."
    for n, topic in enumerate(
        itertools.islice(
            itertools.cycle(
                ["a late parcel", "a refund", "a damaged item", "an address change", "a missing part"]
            ),
            45,
        ),
        1,
    )
]
SYSTEM = "You are the customer-service agent of a small online shop.\nPolicies:\n" + "\n".join(CLAUSES)
RULES = {"rules": [{"tool": "lookup_order", "decision": "allow"}], "default_decision": "ask"}
ORDER = re.compile(r"A-\d+")


def _order(args: dict[str, Any]) -> Any:
    """About 600 tokens of order record."""
    oid = args["order_id"]
    events = [
        {
            "at": f"2025-03-{d:02d}T10:00:00Z",
            "event": f"parcel scanned at depot {d} on its way to the customer",
        }
        for d in range(1, 26)
    ]
    return {"order_id": oid, "status": "delivered", "total": "212.00 USD", "history": events}


LOOKUP = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}


def _config(strategy: str, lookup: Any = _order) -> AgentConfig:
    tools = [
        Tool(name, f"The shop's {name}.", LOOKUP, lookup)
        for name in ("lookup_order", "issue_refund", "send_email")
    ]
    policy = cw.ContextPolicy(WINDOW, 0.8, "trim" if strategy == "trim" else "summarize")
    return dataclasses.replace(agent("desk", tools, RULES, context=policy), system=SYSTEM)


def system_text(body: dict[str, Any]) -> str:
    """The request's system prompt: a string, or text blocks (the last with a cache breakpoint)."""
    system = body.get("system") or ""
    return system if isinstance(system, str) else "".join(b.get("text", "") for b in system)


def brain() -> Any:
    """The model: look the order up, then answer from the record; a summary request gets a summary."""
    ids = itertools.count(1)

    def answer(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        last = body["messages"][-1]
        if system_text(body) == SUMMARY_SYSTEM:
            orders = sorted(set(ORDER.findall(json.dumps(body["messages"]))), key=lambda o: int(o[2:]))
            text = (
                f"The customer asked about orders {', '.join(orders)}; each was delivered, total 212.00 USD."
            )
            return [{"type": "text", "text": text}], "end_turn"
        results = [b for b in last["content"] if b["type"] == "tool_result"]
        if results:
            oid = (ORDER.findall(results[-1]["content"]) or ORDER.findall(json.dumps(body["messages"])))[-1]
            text = f"Order {oid} was delivered on 25 March; its total was 212.00 USD. Anything else?"
            return [{"type": "text", "text": text}], "end_turn"
        texts = [b["text"] for b in last["content"] if b["type"] == "text"]
        use = {"type": "tool_use", "id": f"toolu_{next(ids):06d}", "name": "lookup_order"}
        return [{**use, "input": {"order_id": ORDER.findall(texts[-1])[-1]}}], "tool_use"

    return answer


STORES = {"sqlite": make_sqlite, "dynamodb": make_dynamodb}


@contextmanager
def _engine(
    store: str, strategy: str, tmp_path: Path
) -> Iterator[tuple[Engine, WindowedMessagesApi, Stores]]:
    api = WindowedMessagesApi(WINDOW, brain())
    client = api.client()
    factory: Any = STORES[store]
    ctx: AbstractContextManager[Stores] = factory(tmp_path, FakeClock())
    with ctx as stores:
        model = AnthropicModel(client)
        rt = Runtime(
            stores=stores,
            agents=StaticAgents(_config(strategy)),
            model_for=lambda _c: model,
            notifier_for=lambda _c: RecordingNotifier(),
            invoker=InlineInvoker(),
            public_url="http://test.invalid",
        )
        engine = Engine(rt)
        rt.invoker.resume = engine.resume  # type: ignore[attr-defined]
        try:
            yield engine, api, stores
        finally:
            client.close()


@pytest.mark.parametrize(
    ("store", "strategy"), [("sqlite", "summarize"), ("sqlite", "trim"), ("dynamodb", "summarize")]
)
def test_forty_turns_in_a_16k_window_all_finish_and_nothing_is_lost(
    tmp_path: Path, store: str, strategy: str
) -> None:
    with _engine(store, strategy, tmp_path) as (engine, api, stores):
        sid = None
        for n in range(1, TURNS + 1):
            out = engine.send_message("desk", f"Where is my order A-{1000 + n}?", session_id=sid)
            sid = out.session_id
            assert (out.status, out.stop_reason) == (TurnStatus.FINISHED, StopReason.END_TURN), (n, out)
        assert sid is not None
        key = session_key("", sid)
        turns = stores.turns.session_turns(key)
        history = stores.sessions.load(key)
        compactions = stores.sessions.compactions(key)
        days = engine.usage(day=day_of(engine.now()))

    assert api.refused == [], "no request was refused for its length"
    assert len(turns) == TURNS and all(t.stop_reason is StopReason.END_TURN for t in turns)
    assert len(history) == 4 * TURNS, "every message is kept"
    check_protocol(history)
    agent_calls = [(b, c) for b, c in zip(api.bodies, api.counts, strict=True) if b.get("tools")]
    for body, counted in agent_calls:
        messages = [Message.from_dict(m) for m in body["messages"]]
        check_protocol(messages)
        assert messages[0].role == "user" and messages[-1].role == "user", "the request's protocol is whole"
        estimate = cw.estimate(body["system"], body["tools"], messages)
        assert estimate >= counted, "the local estimate errs high"
        assert counted + body["max_tokens"] <= WINDOW

    # compacted rarely, in big steps, each further on; between two, the history's start stays put
    ups = [c.up_to for c in compactions]
    assert 2 <= len(ups) <= 8 and ups == sorted(set(ups)), ups
    assert all((c.summary is not None) == (strategy == "summarize") for c in compactions)
    starts = [
        json.dumps(Message.from_dict(b["messages"][0]).to_dict()) for b, _ in agent_calls
    ]  # (no cache_control)
    moves = sum(1 for a, b in itertools.pairwise(starts) if a != b)
    assert moves == len(ups), "the first message sent changes only at a compaction"
    assert all(c.up_to % 4 == 0 for c in compactions), "whole exchanges only"

    # every billed token is on the turns, the session and the tenant's day
    billed = Metered(Usage.from_json({k: sum(u[k] for u in api.usage) for k in api.usage[0]}), len(api.usage))
    summaries = sum(1 for b in api.bodies if system_text(b) == SUMMARY_SYSTEM)
    assert summaries == (len(ups) if strategy == "summarize" else 0)
    assert billed.model_calls == 2 * TURNS + summaries
    assert Metered.total(t.metered for t in turns) == billed
    assert all(t.counted == t.metered for t in turns)
    (day,) = days
    assert (day.agent, day.metered) == ("desk", billed)


def test_a_tool_result_over_a_quarter_of_the_window_is_cut_in_the_request_only(tmp_path: Path) -> None:
    huge = "x" * (WINDOW * 3)  # about 2.3 quarters of the window by the estimate

    with _engine("sqlite", "summarize", tmp_path) as (engine, api, stores):
        engine.rt.agents = StaticAgents(_config("summarize", lambda _a: {"order_id": "A-1", "blob": huge}))
        out = engine.send_message("desk", "Where is my order A-1?")
        history = stores.sessions.load(session_key("", out.session_id))

    assert (out.status, out.stop_reason) == (TurnStatus.FINISHED, StopReason.END_TURN)
    assert api.refused == []
    sent = api.bodies[-1]["messages"][2]["content"][0]["content"]
    limit = cw.ContextPolicy(WINDOW).result_chars()
    whole = len(history[2].tool_results[0].content)
    assert sent.endswith(f"the last {whole - limit:,} of this result's {whole:,} characters are not shown]")
    assert huge in history[2].tool_results[0].content, "the session keeps it whole"
    assert count_tokens(api.bodies[-1]) < WINDOW
