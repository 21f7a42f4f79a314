"""Prompt caching, on by default: where the breakpoints go, what they save, and the usage that says so.

Driven through the real anthropic SDK (streaming, as the engine calls it) against
:class:`tests.anthropic_sse.StreamingMessagesApi` with a :class:`tests.token_meter.TokenMeter`, which
bills every request as the Messages API does (a prefix up to a breakpoint written on first sight and
read while byte-identical; more than four breakpoints refused), with the bench's scenario
(bench/prompt_cache.py: 45 policy clauses, three tools, a 600-token lookup and an answer per turn).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from bench import prompt_cache as scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from loopengine.app.ports import ModelRequest, ModelResponse
from loopengine.domain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from loopengine.domain.tokens.usage import PromptCache, Usage
from loopengine.models.anthropic import MAX_BREAKPOINTS, AnthropicModel
from tests.anthropic_sse import StreamingMessagesApi
from tests.harness import Harness, agent, make_harness
from tests.token_meter import TokenMeter, prompt_tokens

pytestmark = pytest.mark.xdist_group("anthropic-sdk")

JsonDict = dict[str, Any]
EPHEMERAL = {"type": "ephemeral"}


@dataclass
class Recording:
    """A ModelClient that keeps every response the engine got from ``inner``."""

    inner: AnthropicModel
    responses: list[ModelResponse] = field(default_factory=list)

    def create(self, request: ModelRequest) -> ModelResponse:
        response = self.inner.create(request)
        self.responses.append(response)
        return response


@dataclass
class Session:
    api: StreamingMessagesApi
    meter: TokenMeter
    model: Recording
    h: Harness
    session_id: str | None = None

    def turn(self, k: int) -> None:
        text = f"Hi, this is about order A-{1000 + k}: where is it, and can I still change the address?"
        outcome = self.h.engine.send_message("bench-cache", text, self.session_id)
        assert outcome.stop_reason is not None and outcome.stop_reason.value == "end_turn", outcome
        self.session_id = outcome.session_id


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    import anthropic

    meter = TokenMeter()
    api = StreamingMessagesApi(scenario.reply, meter=meter, piece=64)
    client = anthropic.Anthropic(api_key="test", base_url=api.url, max_retries=0)
    rules = {"rules": [{"tool": "lookup_order", "decision": "allow"}], "default_decision": "ask"}
    config = replace(agent("bench-cache", scenario._tools(), rules), system=scenario.system_prompt())
    model = Recording(AnthropicModel(client, cache=config.prompt_cache))
    h = make_harness(tmp_path / "cache.db", config, model=model)
    yield Session(api, meter, model, h)
    h.rt.stores.close()
    client.close()
    api.close()


def _marked(body: JsonDict) -> list[tuple[str, int, int]]:
    """Where ``body`` has cache_control: ("tools", i, 0), ("system", i, 0) or ("messages", m, b)."""
    out = [("tools", i, 0) for i, t in enumerate(body.get("tools") or []) if "cache_control" in t]
    system = body["system"] if isinstance(body["system"], list) else []
    out += [("system", i, 0) for i, b in enumerate(system) if "cache_control" in b]
    for m, message in enumerate(body["messages"]):
        out += [("messages", m, b) for b, block in enumerate(message["content"]) if "cache_control" in block]
    return out


def test_each_call_of_a_turn_reads_the_previous_calls_prompt_from_the_cache(session: Session) -> None:
    # WHEN two turns of the session run (two model calls each: the lookup, then the answer)
    session.turn(1)
    session.turn(2)

    # THEN every request marks the system prompt, the newest message and where the call before it
    # put its own newest (never a tool, never more than the API's four), each as {"type": "ephemeral"}
    bodies, bills = session.api.bodies, session.meter.bills
    assert len(bodies) == len(bills) == 4
    for body in bodies:
        messages = body["messages"]
        assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        newest = ("messages", len(messages) - 1, len(messages[-1]["content"]) - 1)
        previous = (
            [("messages", assistants[-1] - 1, len(messages[assistants[-1] - 1]["content"]) - 1)]
            if assistants
            else []
        )
        assert _marked(body) == [("system", 0, 0), *previous, newest]
        assert len(_marked(body)) <= MAX_BREAKPOINTS
        assert body["system"][0]["cache_control"] == EPHEMERAL
        assert body["system"][0]["text"] == scenario.system_prompt() and body["stream"] is True
    # ... so the first call writes its whole prompt, and every later call reads all of the call
    # before it and writes only what came since (the lookup's result, the answer and the new message)
    first = bills[0].usage
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] == prompt_tokens(
        first
    )
    for before, now in itertools.pairwise(bills):
        assert now.usage["cache_read_input_tokens"] == prompt_tokens(before.usage)
        assert now.usage["cache_creation_input_tokens"] == prompt_tokens(now.usage) - prompt_tokens(
            before.usage
        )
        assert now.usage["input_tokens"] == 0
    # AND each call's usage reached the engine in its ModelResponse, as the API reported it
    assert [r.usage for r in session.model.responses] == [Usage.from_json(b.usage) for b in bills]
    assert all(r.usage.output_tokens > 0 for r in session.model.responses)


def test_by_default_turn_12_of_a_long_session_bills_at_most_a_fifth_of_its_prompt() -> None:
    # GIVEN issue 27's session: 12 turns with the agent's default prompt_cache, and 12 with it off
    result = scenario.run(12)
    turn = result["turns"]["12"]

    # THEN off, every prompt token is billed; on, at most a fifth (the goal)
    assert turn["billed_uncached"] == turn["prompt_tokens"] > 20_000
    assert turn["ratio"] <= scenario.GOAL, turn
    assert (
        turn["calls"] == 2 and turn["usage_cached"]["cache_read_input_tokens"] > 0.9 * turn["prompt_tokens"]
    )


# --- the request's form, without a network --------------------------------------------------------

HISTORY = [
    Message.user_text("Order A-1001 arrived broken."),
    Message(
        "assistant", (TextBlock("Let me look."), ToolUseBlock("toolu_1", "lookup_order", {"order_id": "A-1"}))
    ),
    Message("user", (ToolResultBlock("toolu_1", '{"status": "delivered"}'),)),
]
TOOLS: list[JsonDict] = [{"name": "lookup_order", "description": "d", "input_schema": {"type": "object"}}]


def _params(cache: PromptCache, system: str = "Be careful.", history: list[Message] = HISTORY) -> JsonDict:
    request = ModelRequest("claude-test", system, 1024, history, TOOLS)
    params: JsonDict = json.loads(json.dumps(AnthropicModel(cache=cache).params(request)))
    return params


def test_a_one_hour_ttl_marks_every_breakpoint_with_it_and_off_marks_none() -> None:
    hour = _params(PromptCache(ttl="1h"))
    controls = [
        b["cache_control"]
        for b in [*hour["system"], *(m["content"][-1] for m in hour["messages"])]
        if "cache_control" in b
    ]
    assert controls == [{"type": "ephemeral", "ttl": "1h"}] * 3
    off = _params(PromptCache(enabled=False))
    assert "cache_control" not in json.dumps(off) and off["system"] == "Be careful."
    # without a system prompt the stable prefix is the tools: the last one carries the breakpoint
    bare = _params(PromptCache(), system="")
    assert bare["system"] == "" and bare["tools"][-1]["cache_control"] == EPHEMERAL


def test_the_stand_in_refuses_a_fifth_breakpoint_as_the_api_does() -> None:
    body = {
        "model": "m",
        "system": "s",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": EPHEMERAL}] * 5}
        ],
    }
    with pytest.raises(ValueError, match="A maximum of 4 blocks with cache_control"):
        TokenMeter().bill(body, {"content": []})


_block = st.one_of(
    st.builds(TextBlock, st.text(min_size=1, max_size=5)),
    st.builds(ToolResultBlock, st.just("toolu_x"), st.text(max_size=5)),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["user", "assistant"]), st.lists(_block, min_size=1, max_size=25)),
        min_size=1,
        max_size=12,
    )
)
def test_never_more_than_four_breakpoints_and_always_the_newest_message(
    shape: list[tuple[str, list[Any]]],
) -> None:
    history = [Message(role, tuple(blocks)) for role, blocks in shape]  # type: ignore[arg-type]
    params = _params(PromptCache(), history=history)
    assert len(_marked(params)) <= MAX_BREAKPOINTS
    assert "cache_control" in params["messages"][-1]["content"][-1]


def test_usage_adds_up_and_bills_as_the_price_list() -> None:
    a = Usage(
        input_tokens=100, output_tokens=20, cache_creation_input_tokens=1000, cache_read_input_tokens=10_000
    )
    total = a + Usage(1, 2, 3, 4)
    assert total == Usage(101, 22, 1003, 10_004) and total.prompt_tokens == 101 + 1003 + 10_004
    assert a.billed_input() == 100 + 1250 + 1000 and a.billed_input("1h") == 100 + 2000 + 1000
    assert a.as_json() == {
        "input_tokens": 100,
        "output_tokens": 20,
        "cache_creation_input_tokens": 1000,
        "cache_read_input_tokens": 10_000,
    }
    assert Usage.from_json(a.as_json()) == a
    assert (
        Usage.from_json({"input_tokens": None, "output_tokens": True, "cache_read_input_tokens": -3})
        == Usage()
    )
    assert Usage.from_json("nonsense") == Usage() and sum([a, a], Usage()) == a + a
