"""Every turn reaches a resting state, through ``loopengine dev`` as real processes.

- kill -9 of the whole server while an approved tool runs: after a restart the background sweep
  finds the turn (its lease ran out), the model is told the outcome is unknown, nothing ran twice;
- a turn past the API time budget answers 202 ``running`` and the worker finishes it at once (the
  hand-off released the lease; the sweep is off, so nothing else could);
- a model behind a real HTTP server answering 529 ``overloaded_error``: the SDK's own retries
  absorb two; more than that parks the turn durably (``running``) and the sweep retries it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loopengine.domain.messages import Message, check_protocol
from tests.agent_folders import BLOCKING_TOOLS_PY, write_agent
from tests.anthropic_sse import sse_body
from tests.dev_support import DevProcess, free_port, request

pytestmark = pytest.mark.slow  # real processes, seconds per test: make test runs these first

FAST = {
    "LOOPENGINE_LEASE_SECONDS": "2",
    "LOOPENGINE_HANDOFF_GRACE_SECONDS": "1",
    "LOOPENGINE_MODEL_RETRY_SECONDS": "0.5",
}

BLOCKING_TOOLS = BLOCKING_TOOLS_PY.format(tool="ship", description="Ship something.", result="shipped")

ECHO_SCRIPT = """\
from loopengine.models.scripted import call, say, use


def respond(request):
    last = request.messages[-1]
    if last.tool_results:
        return say("told: " + last.tool_results[0].content)
    return call(use("ship", {"x": 7}))
"""

ASK_SHIP = "rules:\n  - tool: ship\n    decision: ask\n"

ROUNDS_TOOLS = """\
from pathlib import Path

from loopengine.authoring.tools import Tool

LOG = Path(__file__).parent / "calls.log"
SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def _step(args):
    with LOG.open("a") as out:
        out.write(f"{args['x']}\\n")
    return {"stepped": args["x"]}


TOOLS = [Tool("step", "Take a step.", SCHEMA, _step)]
"""

ROUNDS_SCRIPT = """\
from loopengine.models.scripted import call, say, use


def respond(request):
    done = sum(len(m.tool_results) for m in request.messages)
    return call(use("step", {"x": done + 1})) if done < 3 else say("three steps taken")
"""

ALLOW_STEP = "rules:\n  - tool: step\n    decision: allow\n"


def _agent(name: str, tool: str) -> str:
    return f"name: {name}\nmodel: test-model\nsystem: You help.\ntools: [{tool}]\n"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ}
    for name in (
        "LOOPENGINE_TABLE",
        "LOOPENGINE_DEFAULT_WEBHOOK_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ):
        env.pop(name, None)
    return {
        **env,
        "LOOPENGINE_DB": str(tmp_path / "dev.db"),
        "LOOPENGINE_ADMIN_AUTH": "admin:secret",
        "LOOPENGINE_AGENTS_PATH": str(tmp_path / "agents"),
        "LOOPENGINE_MODEL": "scripted",
        **extra,
    }


def _serve(servers: list[DevProcess], env: dict[str, str], log: Path, *args: str) -> DevProcess:
    srv = DevProcess(env, free_port(), log, args)
    srv.start()
    servers.append(srv)
    return srv


def _until(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Poll ``check`` until it returns something truthy (a generous timeout, not a timing claim)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _finished(port: int, turn_id: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        status, body = request(port, "GET", f"/turns/{turn_id}")
        assert status == 200, body
        return body if body["status"] == "finished" else None

    return check


def _history(port: int, session_id: str) -> list[Message]:
    status, body = request(port, "GET", f"/sessions/{session_id}")
    assert status == 200, body
    history = [Message.from_dict(m) for m in body["messages"]]
    check_protocol(history)
    return history


def test_kill_9_while_an_approved_tool_runs(tmp_path: Path, servers: list[DevProcess]) -> None:
    folder = write_agent(
        tmp_path / "agents",
        "shipper",
        agent=_agent("shipper", "ship"),
        tools=BLOCKING_TOOLS,
        script=ECHO_SCRIPT,
        rules=ASK_SHIP,
    )
    env = _env(tmp_path, **FAST)
    log = tmp_path / "dev.log"
    first = _serve(servers, env, log, "--sweep-interval", "1")
    status, paused = request(first.port, "POST", "/agents/shipper/messages", {"message": "ship it"})
    assert status == 202 and paused["status"] == "paused", paused
    pending = paused["pendingItems"][0]["pendingId"]
    status, body = request(
        first.port, "POST", f"/pending-approvals/{pending}/resolve", {"decision": "approve"}
    )
    assert status == 202 and body["status"] == "resuming", body
    _until("the approved tool to start", (folder / "started.log").exists)

    first.kill()  # the server and every environment, mid-call
    second = _serve(servers, env, log, "--sweep-interval", "1")

    turn = _until("the sweep to bring the turn to rest", _finished(second.port, paused["turnId"]))
    assert (folder / "started.log").read_text().split() == ["7"]  # it never ran twice
    assert not (folder / "finished.log").exists()
    result = _history(second.port, paused["sessionId"])[-2].tool_results
    assert len(result) == 1 and json.loads(result[0].content)["status"] == "unknown"
    assert turn["stopReason"] == "end_turn" and '"status": "unknown"' in turn["text"]
    kinds = [e["type"] for e in turn["audit"]]
    assert "sweep_handed_on" in kinds and kinds.count("tool_outcome") == 1
    assert "recovered" in second.log_text()  # the sweep said what it did


def test_turn_past_the_api_budget_finishes_in_the_worker(tmp_path: Path, servers: list[DevProcess]) -> None:
    folder = write_agent(
        tmp_path / "agents",
        "rounds",
        agent=_agent("rounds", "step"),
        tools=ROUNDS_TOOLS,
        script=ROUNDS_SCRIPT,
        rules=ALLOW_STEP,
    )
    env = _env(tmp_path, LOOPENGINE_API_BUDGET_SECONDS="0")
    srv = _serve(servers, env, tmp_path / "dev.log", "--sweep-interval", "0")  # only the hand-off can help
    status, body = request(srv.port, "POST", "/agents/rounds/messages", {"message": "go"})
    assert status == 202 and body["status"] == "running", body
    turn = _until("the handed-off turn to finish", _finished(srv.port, body["turnId"]))
    assert turn["stopReason"] == "end_turn" and turn["text"] == "three steps taken"
    assert "handed_off" in [e["type"] for e in turn["audit"]]
    assert (folder / "calls.log").read_text().split() == ["1", "2", "3"]
    assert len(_history(srv.port, body["sessionId"])) == 8


class FakeAnthropic:
    """A Messages API on 127.0.0.1 that answers 529 ``overloaded_error`` ``failures`` times, then a reply."""

    def __init__(self, failures: int) -> None:
        self.failures, self.seen = failures, 0
        self._lock = threading.Lock()
        fake = self

        class Handle(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                sent = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                with fake._lock:
                    fake.seen += 1
                    fail = fake.seen <= fake.failures
                if fail:
                    error = {"type": "overloaded_error", "message": "Overloaded"}
                    self._send(529, {"type": "error", "error": error}, fake.seen)
                elif sent.get("stream"):  # the model's answer streamed, as the API sends it
                    self._stream(fake.reply(), fake.seen)
                else:
                    self._send(200, fake.reply(), fake.seen)

            def _stream(self, body: dict[str, Any], n: int) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("request-id", f"req_{n}")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a call walked away from
                    self.wfile.write(sse_body(body))

            def _send(self, status: int, body: dict[str, Any], n: int) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("retry-after-ms", "20")  # keeps the SDK's own backoff short
                self.send_header("request-id", f"req_{n}")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handle)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def reply(self) -> dict[str, Any]:
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": "test-model",
            "content": [{"type": "text", "text": "back after the overload"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def anthropic_env(tmp_path: Path) -> Iterator[Callable[[int], tuple[FakeAnthropic, dict[str, str]]]]:
    fakes: list[FakeAnthropic] = []

    def make(failures: int) -> tuple[FakeAnthropic, dict[str, str]]:
        fake = FakeAnthropic(failures)
        fakes.append(fake)
        write_agent(tmp_path / "agents", "talker")
        env = _env(tmp_path, **FAST, ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=fake.url)
        env.pop("LOOPENGINE_MODEL")
        return fake, env

    yield make
    for fake in fakes:
        fake.close()


def test_two_529s_are_absorbed_by_the_sdk(
    tmp_path: Path,
    servers: list[DevProcess],
    anthropic_env: Callable[[int], tuple[FakeAnthropic, dict[str, str]]],
) -> None:
    fake, env = anthropic_env(2)
    srv = _serve(servers, env, tmp_path / "dev.log", "--sweep-interval", "0")
    status, body = request(srv.port, "POST", "/agents/talker/messages", {"message": "hello"})
    assert status == 200, body
    assert body["status"] == "finished" and body["text"] == "back after the overload"
    assert fake.seen == 3


def test_overload_past_the_sdk_retries_waits_and_the_sweep_retries(
    tmp_path: Path,
    servers: list[DevProcess],
    anthropic_env: Callable[[int], tuple[FakeAnthropic, dict[str, str]]],
) -> None:
    fake, env = anthropic_env(4)  # the SDK tries 3 times per call: the first call fails for good
    srv = _serve(servers, env, tmp_path / "dev.log", "--sweep-interval", "1")
    status, body = request(srv.port, "POST", "/agents/talker/messages", {"message": "hello"})
    assert status == 202 and body["status"] == "retrying", body  # honest: not "running"
    status, waiting = request(srv.port, "GET", f"/turns/{body['turnId']}")
    assert waiting["status"] in ("retrying", "running", "finished")  # the sweep may have retried it
    if waiting["status"] == "retrying":
        assert waiting["attempt"] == 1 and waiting["retryAt"] > 0
    turn = _until("the sweep to retry the model", _finished(srv.port, body["turnId"]))
    assert turn["stopReason"] == "end_turn" and turn["text"] == "back after the overload"
    kinds = [e["type"] for e in turn["audit"]]
    assert "retry_scheduled" in kinds and "sweep_handed_on" in kinds
    assert fake.seen == 5
