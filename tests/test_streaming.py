"""Token streaming: model text deltas become turn events; the durable history keeps whole messages.

* The worker writes what streamed as a few coalesced ``text:delta`` events (at most one per 0.25 s
  per call, none for a fast model), in offset order, before the ``model_response`` that holds the
  whole text; the session history holds whole messages only.
* In the same process every piece is on the live bus at once: ``follow`` yields each character once,
  live pieces and durable events in the turn's order, whatever call they come from.
* A call the worker walks away from stops streaming (the model's stream is closed), and writes no
  piece after its ``model_call_abandoned``.
* AnthropicModel streams through the real SDK over its HTTP transport (Server-Sent Events bodies):
  text deltas in order, a newline between text blocks, tool input assembled; an error event inside
  the stream, a cut stream and a broken connection are model errors of the right kind.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from loopengine.app.follow import follow
from loopengine.app.live import BUS, DELTA_FLUSH_SECONDS, LiveBus, Piece, StreamClosed, TextStream
from loopengine.app.ports import ModelRequest
from loopengine.client import Client
from loopengine.domain.base.clock import FakeClock, SystemClock
from loopengine.domain.base.errors import FatalModelError, RetryableModelError
from loopengine.domain.decisions import Denial
from loopengine.domain.messages import Message, TextBlock, ToolUseBlock
from loopengine.domain.principals import Principal
from loopengine.domain.turns import StopReason
from loopengine.http import api
from loopengine.models.anthropic import AnthropicModel
from loopengine.models.scripted import ScriptedModel, call, pieces, say, use
from loopengine.stores.sqlite import open_sqlite_stores
from tests.agent_folders import write_agent
from tests.anthropic_sse import StreamingMessagesApi, encode, sse_body, sse_events, text_reply
from tests.dev_support import AUTH, DevProcess, free_port, request
from tests.handler_support import call as call_handler
from tests.handler_support import load_event, with_body
from tests.harness import Build, Calls, Harness, agent, make_harness
from tests.pty_support import Terminal
from tests.test_dev_reliability import _env as dev_env
from tests.test_live_chat import Stream

# With tests/test_model_anthropic.py: one pytest-xdist worker imports the Anthropic SDK (about 2 s of CPU)
pytestmark = pytest.mark.xdist_group("anthropic-sdk")

TEXT = " ".join(f"word{i}" for i in range(24)) + "."
RULES = {"rules": [{"tool": "peek", "decision": "allow"}], "default_decision": "ask"}


def _harness(tmp_path: Path, model: ScriptedModel, real_clock: bool = False) -> Harness:
    calls = Calls()
    talker = agent("talker", [calls.tool("peek"), calls.tool("refund")], RULES)
    h = make_harness(tmp_path / f"stream{int(real_clock)}.db", talker, model=model)
    if real_clock:  # the same runtime on the system clock: pieces and events stamped as in production
        h.rt.stores.close()
        stores = open_sqlite_stores(str(tmp_path / "stream-real.db"), SystemClock())
        h.engine.rt = dataclasses.replace(h.rt, stores=stores)
    return h


@pytest.fixture
def built(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def build(model: ScriptedModel, real_clock: bool = False) -> Harness:
        made.append(_harness(tmp_path, model, real_clock))
        return made[-1]

    yield build
    for h in made:
        h.rt.stores.close()


def _slow(script: list[Any], delay: float) -> ScriptedModel:
    model = ScriptedModel.from_list(script)
    model.delay = delay
    return model


def _deltas(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "text:delta"]


def _joined(deltas: list[dict[str, Any]]) -> str:
    """The pieces placed by their offsets (each must follow on from the last)."""
    text = ""
    for d in deltas:
        assert d["offset"] == len(text), (d, text)
        text += d["text"]
    return text


# --- the durable side: coalesced, ordered, whole messages in the history ------------------------


def test_a_streamed_answer_is_stored_as_a_few_coalesced_deltas_before_the_whole_message(
    built: Callable[[ScriptedModel], Harness],
) -> None:
    h = built(_slow([say(TEXT)], delay=0.04))  # 25 pieces over about a second
    started = time.monotonic()
    out = h.engine.send_message("talker", "hello")
    took = time.monotonic() - started
    events = h.engine.audit(out.turn_id)
    deltas = _deltas(events)
    assert 2 <= len(deltas) <= took / DELTA_FLUSH_SECONDS + 1, (len(deltas), took)
    assert len(deltas) < len(pieces(say(TEXT)))  # coalesced: not one write per piece
    assert len({d["call"] for d in deltas}) == 1
    joined = _joined(deltas)
    assert joined and TEXT.startswith(joined) and joined != TEXT  # the tail comes with the whole message
    kinds = [e["type"] for e in events]
    assert max(i for i, k in enumerate(kinds) if k == "text:delta") < kinds.index("model_response")
    assert events[kinds.index("model_response")]["text"] == TEXT
    history = h.engine.history(out.session_id)
    assert [m.to_dict() for m in history] == [
        Message.user_text("hello").to_dict(),
        Message("assistant", (TextBlock(TEXT),)).to_dict(),
    ]


def test_a_model_that_answers_at_once_writes_no_delta(built: Callable[[ScriptedModel], Harness]) -> None:
    h = built(ScriptedModel.from_list([say(TEXT)]))
    out = h.engine.send_message("talker", "hello")
    assert _deltas(h.engine.audit(out.turn_id)) == []


def test_a_call_the_worker_walks_away_from_stops_streaming(
    built: Callable[[ScriptedModel], Harness],
) -> None:
    long_text = " ".join(f"w{i}" for i in range(400))
    h = built(_slow([say(long_text)], delay=0.02))  # 8 s if nobody stopped it
    answers: list[Any] = []
    sender = threading.Thread(
        target=lambda: answers.append(h.engine.send_message("talker", "hi", "ses-walk"))
    )
    sender.start()
    turn_id = _turn_of(h, "ses-walk")
    _until(lambda: _deltas(h.rt.stores.turns.events(turn_id)) or None)  # it is streaming
    h.engine.cancel(turn_id, Principal("ann"))
    sender.join(timeout=5)
    assert answers and answers[0].stop_reason.value == "cancelled"
    published = BUS.position(turn_id)
    time.sleep(0.3)
    assert BUS.position(turn_id) == published  # the model's stream was closed: no more pieces
    assert published < len(pieces(say(long_text)))
    events = h.engine.audit(turn_id)
    kinds = [e["type"] for e in events]
    assert "model_response" not in kinds
    assert max(i for i, k in enumerate(kinds) if k == "text:delta") < kinds.index("model_call_abandoned")


def _turn_of(h: Harness, session_id: str) -> str:
    """The id of the session's turn, once the message that starts it has landed."""
    turn_id: str = _until(
        lambda: next(iter(t.turn_id for t in h.rt.stores.turns.session_turns(session_id)), None)
    )
    return turn_id


def _until(probe: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.01)
    raise AssertionError("timed out")


# --- the live side: this process's readers --------------------------------------------------------


@pytest.mark.parametrize("real_clock", [True, False], ids=["system-clock", "frozen-clock"])
def test_follow_gives_each_character_once_in_the_turns_order_across_calls(
    built: Callable[..., Harness], real_clock: bool
) -> None:
    first, last = "Let me look that up for you right away.", "All looked up: nothing more to do here today."
    h = built(_slow([call(use("peek", {"x": 1}, text=first)), say(last)], delay=0.03), real_clock)
    sender = threading.Thread(target=lambda: h.engine.send_message("talker", "hi", "ses-follow"))
    sender.start()
    turn_id = _turn_of(h, "ses-follow")
    seen = list(follow(h.engine, turn_id))
    sender.join(timeout=5)
    kinds = [e["type"] for e in seen]
    assert kinds[0] == "started" and "finished" in kinds
    live = [e for e in seen if e.get("live")]
    assert len(live) > 4 and all("seq" not in e for e in live)  # pieces, as they came
    # per call: the pieces (live and durable) spell its text exactly once, before its model_response
    responses = [i for i, k in enumerate(kinds) if k == "model_response"]
    assert [seen[i]["text"] for i in responses] == [first, last]
    calls = list(dict.fromkeys(e["call"] for e in seen if e["type"] == "text:delta"))
    assert len(calls) == 2
    for n, (call_id, end) in enumerate(zip(calls, responses, strict=True)):
        mine = [i for i, e in enumerate(seen) if e["type"] == "text:delta" and e["call"] == call_id]
        assert _joined([seen[i] for i in mine]) == [first, last][n]
        assert max(mine) < end
    # the second call's text comes after the first call's tool outcome
    assert kinds.index("tool_outcome") < min(
        i for i, e in enumerate(seen) if e["type"] == "text:delta" and e["call"] == calls[1]
    )
    durable = [e["seq"] for e in seen if "seq" in e]
    assert durable == sorted(durable) and len(set(durable)) == len(durable)
    assert all(e["text"] for e in seen if e["type"] == "text:delta")  # nothing yielded twice, or empty


class StoreStandIn:
    """What ``follow`` reads of an engine: ``turn`` and ``events``, over a list the test controls.

    ``on_read`` runs inside each read, after the reader's bus read: what the reader can only see late.
    """

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.trail, self.reads = events, 0
        self.on_read: Callable[[], None] = lambda: None

    def turn(self, turn_id: str, who: Any = None) -> None:
        return None

    def events_after(self, after: int) -> tuple[list[dict[str, Any]], int, bool]:
        self.reads += 1
        self.on_read()
        found = [{"seq": i, **e} for i, e in enumerate(self.trail, start=1) if i > after]
        done = any(e["type"] == "finished" for e in self.trail)
        return found, len(self.trail), done


def _follow_stand_in(store: StoreStandIn, bus: LiveBus, **kw: Any) -> Iterator[dict[str, Any]]:
    engine: Any = store
    engine.events = lambda _t, after, _w, _who: store.events_after(after)
    return follow(engine, "trn_x", bus=bus, **kw)


def test_follow_drops_a_piece_it_reads_only_after_the_end_of_its_call() -> None:
    bus = LiveBus()
    bus.publish("trn_x", Piece("c1", 0, "Hel", 1.0))
    store = StoreStandIn(
        [{"type": "started", "at": 0.5}, {"type": "model_response", "at": 1.2, "text": "Hello"}]
    )
    late = [
        lambda: bus.publish("trn_x", Piece("c1", 3, "lo", 1.1)),  # published before the end, read after it
        lambda: store.trail.append({"type": "finished", "at": 1.3, "text": "Hello"}),
    ]
    store.on_read = lambda: late.pop(0)() if late else None
    seen = [(e["type"], e.get("text")) for e in _follow_stand_in(store, bus, timeout=3)]
    assert seen == [
        ("started", None),
        ("text:delta", "Hel"),
        ("model_response", "Hello"),
        ("finished", "Hello"),
    ]


def test_follow_gives_a_new_calls_first_piece_after_a_read_not_after_the_next_timed_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loopengine.app import follow as following

    monkeypatch.setattr(following, "FIRST_READ_SECONDS", 60.0)  # no timed read after the first
    bus, store = LiveBus(), StoreStandIn([{"type": "started", "at": 0.5}])
    feed = _follow_stand_in(store, bus, timeout=5)
    assert next(feed)["type"] == "started"
    store.trail.append({"type": "tool_outcome", "at": 0.9})
    bus.publish("trn_x", Piece("c2", 0, "Next", 1.0))
    started = time.monotonic()
    assert [next(feed)["type"], next(feed)["text"]] == ["tool_outcome", "Next"]  # the outcome first
    assert time.monotonic() - started < 4


def test_follow_from_a_cursor_skips_what_was_seen_and_stops_at_a_pause(
    built: Callable[[ScriptedModel], Harness],
) -> None:
    script = [call(use("refund", {"x": 2}, text="A refund needs a human.")), say("ok")]
    h = built(ScriptedModel.from_list(script))
    out = h.engine.send_message("talker", "refund me")
    everything = list(follow(h.engine, out.turn_id, until_pause=True, timeout=5))
    kinds = [e["type"] for e in everything]
    assert kinds.index("paused") + 1 == kinds.index("approval:pending") and "decided" not in kinds
    assert "".join(e["text"] for e in everything if e["type"] == "text:delta") == "A refund needs a human."
    cursor = everything[-1]["seq"]
    assert list(follow(h.engine, out.turn_id, after=cursor, timeout=0.3)) == []  # nothing new, no stale text
    h.engine.resolve(out.pending[0].pending_id, Denial(), Principal("ann"))
    later = list(follow(h.engine, out.turn_id, after=cursor, timeout=5))
    assert later[0]["type"] == "decided" and "finished" in [e["type"] for e in later]


def test_the_bus_is_bounded_and_a_reader_behind_it_skips_what_fell_out() -> None:
    bus = LiveBus(pieces=3, turns=2)
    for i in range(5):
        bus.publish("t1", Piece("c", i, str(i), float(i)))
    held = [Piece("c", i, str(i), float(i)) for i in (2, 3, 4)]
    assert bus.read("t1", 0) == (held, 5)
    assert bus.read("t1", 4) == ([Piece("c", 4, "4", 4.0)], 5)
    bus.publish("t2", Piece("c", 0, "x", 0.0))
    bus.publish("t3", Piece("c", 0, "y", 0.0))  # the least recently written turn is dropped
    assert bus.position("t1") == 0 and bus.position("t3") == 1
    assert bus.wait("t3", 0, 0.0) and not bus.wait("t3", 1, 0.01)


def test_a_text_stream_flushes_what_came_since_and_refuses_pieces_once_closed() -> None:
    bus = LiveBus()
    stream = TextStream("trn_1", FakeClock(), bus)
    assert stream.flush() is None
    stream("Hello")
    stream(", ")
    first = stream.flush()
    assert first is not None and (first.offset, first.text) == (0, "Hello, ")
    stream("world")
    second = stream.flush()
    assert second is not None and (second.offset, second.text) == (7, "world")
    assert [p.text for p in bus.read("trn_1", 0)[0]] == ["Hello", ", ", "world"]
    stream.close()
    with pytest.raises(StreamClosed):
        stream("more")


# --- AnthropicModel: the SDK's streaming, over its HTTP transport -------------------------------

API_KEY = "sk-ant-test-streaming-secret"
LOOKUP = {"order_id": "A-1001", "n": [1, 2]}
TOOL_REPLY = {
    **text_reply("First I look.", "Then I ask."),
    "content": [
        {"type": "text", "text": "First I look."},
        {"type": "tool_use", "id": "toolu_9", "name": "lookup_order", "input": LOOKUP},
        {"type": "text", "text": "Then I ask."},
    ],
    "stop_reason": "tool_use",
}


def _request(on_text: Callable[[str], None] | None) -> ModelRequest:
    return ModelRequest("claude-test", "be brief", 256, [Message.user_text("hi")], [], on_text=on_text)


def _model(handler: Callable[[httpx2.Request], httpx2.Response]) -> AnthropicModel:
    import anthropic

    client = anthropic.Anthropic(
        api_key=API_KEY, max_retries=0, http_client=httpx2.Client(transport=httpx2.MockTransport(handler))
    )
    return AnthropicModel(client)


def _sse(body: bytes | Iterator[bytes]) -> Callable[[httpx2.Request], httpx2.Response]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        headers = {"content-type": "text/event-stream", "request-id": "req_7"}
        return httpx2.Response(200, headers=headers, content=body)

    sent: list[httpx2.Request] = []
    handler.sent = sent  # type: ignore[attr-defined]
    return handler


def test_anthropic_streams_text_deltas_and_assembles_the_message() -> None:
    handler = _sse(sse_body(TOOL_REPLY, piece=3))
    got: list[str] = []
    response = _model(handler).create(_request(got.append))
    assert b'"stream":true' in handler.sent[0].content.replace(b" ", b"")  # type: ignore[attr-defined]
    assert len(got) > 5 and "".join(got) == "First I look.\nThen I ask."
    assert "\n" in got  # the newline between text blocks is a piece of its own
    assert response.content == (
        TextBlock("First I look."),
        ToolUseBlock(id="toolu_9", name="lookup_order", input=LOOKUP),
        TextBlock("Then I ask."),
    )
    assert response.stop_reason == "tool_use" and response.usage.output_tokens == 34
    assert Message("assistant", response.content).text == "".join(got)


def test_anthropic_without_on_text_does_not_stream() -> None:
    seen: list[bytes] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.content)
        return httpx2.Response(200, json=text_reply("whole"))

    assert _model(handler).create(_request(None)).content == (TextBlock("whole"),)
    assert b'"stream"' not in seen[0]


def _error_event(kind: str) -> bytes:
    head = b"".join(encode(n, d) for n, d in sse_events(text_reply("partial text"), piece=4)[:3])
    return head + encode("error", {"type": "error", "error": {"type": kind, "message": f"{kind} mid-stream"}})


@pytest.mark.parametrize(
    ("body", "error", "words"),
    [
        (_error_event("overloaded_error"), RetryableModelError, "overloaded_error"),
        (_error_event("api_error"), RetryableModelError, "api_error"),
        (_error_event("invalid_request_error"), FatalModelError, "invalid_request_error"),
        (sse_body(text_reply("cut short"))[:-60], RetryableModelError, "ended before its message"),
        (b"", RetryableModelError, "ended before its message"),
    ],
)
def test_anthropic_stream_failures_are_model_errors_of_the_right_kind(
    body: bytes, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words) as caught:
        _model(_sse(body)).create(_request(lambda _t: None))
    assert API_KEY not in str(caught.value)
    other = FatalModelError if error is RetryableModelError else RetryableModelError
    assert not isinstance(caught.value, other)


def test_anthropic_a_connection_broken_mid_stream_is_retryable() -> None:
    def broken() -> Iterator[bytes]:
        yield sse_body(text_reply("never finished"))[:700]
        raise httpx2.ReadError("connection reset by peer")

    got: list[str] = []
    with pytest.raises(RetryableModelError, match="broke off"):
        _model(_sse(broken())).create(_request(got.append))
    assert "".join(got)  # what came before the break was handed over


def test_anthropic_a_caller_that_walks_away_ends_the_stream() -> None:
    sent: list[int] = []

    def endless() -> Iterator[bytes]:
        events = sse_events(text_reply("x" * 4000), piece=1)
        for name, data in events:
            sent.append(1)
            yield encode(name, data)

    def walk_away(piece: str) -> None:
        if len(sent) > 20:
            raise StreamClosed("mc_1")

    with pytest.raises(StreamClosed):
        _model(_sse(endless())).create(_request(walk_away))
    assert len(sent) < 100  # the SDK stopped reading: the response was closed


# --- the live channel's message: answered at once, the worker runs the turn ----------------------


@pytest.mark.parametrize("prefer", ["respond-async", "wait=5, Respond-Async ; x=1"])
def test_prefer_respond_async_answers_running_at_once_and_the_worker_runs_the_turn(
    install_harness: Build, prefer: str
) -> None:
    model = ScriptedModel.from_list([say("Hello from the worker.")])
    h = install_harness(agent("talker", [], RULES), model=model, inline=False)
    event = with_body(load_event("post_message", **{"customer-service": "talker"}), {"message": "hi"})
    event["headers"] = {**event["headers"], "prefer": prefer}
    status, body = call_handler(api.handler, event)
    assert status == 202 and body["status"] == "running" and body["turnId"].startswith("trn_"), body
    assert model.requests == []  # the request did not call the model: the worker does
    assert h.invoker.invoked == [body["turnId"]]  # type: ignore[attr-defined]
    h.deliver_resumes()
    done = h.engine.outcome(body["turnId"])
    assert (done.stop_reason, done.text) == (StopReason.END_TURN, "Hello from the worker.")


def test_without_prefer_the_request_runs_the_turn_itself(install_harness: Build) -> None:
    h = install_harness(
        agent("talker", [], RULES), model=ScriptedModel.from_list([say("Done.")]), inline=False
    )
    event = with_body(load_event("post_message", **{"customer-service": "talker"}), {"message": "hi"})
    event["headers"] = {**event["headers"], "prefer": "return=minimal"}
    status, body = call_handler(api.handler, event)
    assert (status, body["status"], body["text"]) == (200, "finished", "Done.")
    assert h.invoker.invoked == []  # type: ignore[attr-defined]


# --- end to end: loopengine dev, the SDK against a local streaming Messages API, SSE, the chat ----

ANSWER = "Streaming " + " ".join(f"token{i}" for i in range(36)) + " finale."


@pytest.fixture
def streaming_dev(tmp_path: Path) -> Iterator[tuple[DevProcess, StreamingMessagesApi]]:
    messages_api = StreamingMessagesApi(lambda _n, _body: text_reply(ANSWER), gap=0.05, piece=8)  # ~2.5 s
    write_agent(tmp_path / "agents", "talker")
    env = dev_env(tmp_path, ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=messages_api.url)
    env.pop("LOOPENGINE_MODEL")
    srv = DevProcess(env, free_port(), tmp_path / "dev.log", ("--workers", "2", "--sweep-interval", "0"))
    srv.start()
    yield srv, messages_api
    srv.stop()
    messages_api.close()


@pytest.mark.slow
def test_dev_streams_model_text_as_server_sent_events_and_the_chat_prints_it_as_it_arrives(
    streaming_dev: tuple[DevProcess, StreamingMessagesApi],
) -> None:
    srv, messages_api = streaming_dev
    url = f"http://127.0.0.1:{srv.port}"
    with Client(url, "admin:secret") as client:
        sent = client.send_message("talker", "hello")  # Prefer: respond-async: answered at once
    assert sent.status == "running", sent
    stream = Stream(srv.port, f"/turns/{sent.turn_id}/events", Authorization=AUTH)
    try:
        first = stream.until("text:delta")[-1]
        assert not messages_api.finished.is_set()  # shown while the model is still talking
        frames = [first, *stream.until("model_response")]
    finally:
        stream.close()
    deltas = [f["data"] for f in frames if f["event"] == "text:delta"]
    assert 2 <= len(deltas) < len(sse_events(text_reply(ANSWER), piece=8))  # coalesced, not per token
    assert ANSWER.startswith(_joined(deltas)) and frames[-1]["data"]["text"] == ANSWER
    assert [f["id"] for f in frames] == [str(f["data"]["seq"]) for f in frames]
    assert messages_api.bodies[0]["stream"] is True
    # the chat: the text appears while the model talks, and the whole message once
    messages_api.finished.clear()
    term = Terminal(
        [sys.executable, "-m", "loopengine.local.cli", "chat", "talker", "--url", url],
        {**os.environ, "LOOPENGINE_CHAT_AUTH": "admin:secret"},
    )
    try:
        term.expect("you> ")
        term.line("hello again")
        term.expect(r"agent> Streaming token0")
        assert not messages_api.finished.is_set()  # printed before the answer was complete
        term.expect(r"finale\.\n")
        term.expect("you> ")
        os.write(term.fd, b"\x04")
        assert term.wait() == 0
    finally:
        term.close()
    assert term.output.count(ANSWER) == 1 and term.output.count("finale.") == 1, term.output
    assert "Traceback" not in term.output
    _, session = request(srv.port, "GET", f"/sessions/{sent.session_id}")
    assert [m["content"] for m in session["messages"]][1] == [{"type": "text", "text": ANSWER}]


# --- offline: loopengine dev with no key streams the scripted model's text --------------------------

OFFLINE = " ".join(f"offline{i}" for i in range(40)) + "."
SAY_SCRIPT = f"""\
from loopengine.models.scripted import say


def respond(request):
    return say({OFFLINE!r})
"""


def test_dev_without_a_key_streams_the_offline_models_text_as_text_delta_events(tmp_path: Path) -> None:
    # GIVEN `loopengine dev` at its own pace for the offline model (no key: the agent's script answers)
    write_agent(tmp_path / "agents", "talker", script=SAY_SCRIPT)
    env = dev_env(tmp_path)
    env.pop("LOOPENGINE_MODEL")
    env.pop("LOOPENGINE_SCRIPTED_DELAY", None)
    srv = DevProcess(env, free_port(), tmp_path / "dev.log", ("--sweep-interval", "0"), streamed=True)
    srv.start()
    try:
        # WHEN a message comes in
        status, body = request(srv.port, "POST", "/agents/talker/messages", {"message": "hello"})
        assert (status, body["status"], body["text"]) == (200, "finished", OFFLINE), body
        _, events = request(srv.port, "GET", f"/turns/{body['turnId']}/events")
    finally:
        srv.stop()

    # THEN its text was written in pieces while the model talked, before the whole message
    kinds = [e["type"] for e in events["events"]]
    deltas = _deltas(events["events"])
    assert len(deltas) >= 2 and max(i for i, k in enumerate(kinds) if k == "text:delta") < kinds.index(
        "model_response"
    )
    assert OFFLINE.startswith(_joined(deltas)) and len(_joined(deltas)) > len(OFFLINE) // 3
    # AND the server's first lines are plain text, none of them a stray JSON object
    lines = srv.log_text().splitlines()
    assert f"  try: curl -s localhost:{srv.port}/health" in lines, lines
    assert not [line for line in lines if line.lstrip().startswith("{")], lines
