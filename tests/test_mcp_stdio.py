"""stdio MCP servers (agent.yaml ``command:``) under the same rules, really started and really crashed.

The engine is built by ``build_engine`` (the composition root), on SQLite, with the agent folder's
offline script as the model, as tests/test_mcp.py does for HTTP servers. Two servers:

- ``mcp-server-time`` from PyPI (a dev dependency), mounted with the three lines docs/agents.md shows;
- tests/mcp_stdio_server.py (the ``mcp`` SDK's own server), which records every execution with its
  process id and can exit in the middle of a call.

Each test stops the servers it started (:func:`loopengine.mcp.stdio.stop_servers`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.app.engine import Engine
from loopengine.app.request.resolution import Decider
from loopengine.authoring.registry import AgentRegistry
from loopengine.authoring.tools import args_hash
from loopengine.bootstrap import build_engine
from loopengine.domain.base.errors import AgentUnavailable, InvalidInput
from loopengine.domain.decisions import Approval
from loopengine.domain.turns import TurnStatus
from tests.agent_folders import write_agent
from tests.dev_support import DevProcess, admin_env, free_port, request

# One worker runs them (the MCP loop and the SDK are loaded once), beside the HTTP ones' worker
pytestmark = pytest.mark.xdist_group("mcp-stdio")

ROOT = Path(__file__).resolve().parent.parent
ALICE = Decider("user:alice", "test")
SECRET = "till-secret-5e8d2a7c91"
Make = Callable[..., Engine]

CLOCK = """\
name: clock
model: test-model
system: You tell the time.
mcp_servers:
  - name: time
    command: [mcp-server-time, --local-timezone, UTC]
    env: {TZ: UTC}
    tools: [get_current_time, convert_time]
    timeout: 60
"""

CLOCK_RULES = """\
rules:
  - tool: time_get_current_time
    decision: allow
  - tool: time_convert_time
    decision: ask
default_decision: deny
"""

TILL = """\
name: till
model: test-model
system: You take payments.
mcp_servers:
  - name: till
    command: [python, -m, tests.mcp_stdio_server]
    env: {{TILL_LOG: {log}, TILL_CRASH: {crash}}}
    env_from: {{TILL_TOKEN: TILL_SECRET}}
    timeout: 30
"""

TILL_RULES = """\
rules:
  - tool: till_whoami
    decision: allow
  - tool: till_charge
    decision: ask
default_decision: deny
"""

SCRIPT = """\
from loopengine.models.scripted import call, say, use


def respond(request):
    msgs = request.messages
    start = max(i for i, m in enumerate(msgs) if m.role == "user" and m.text)
    results = [r for m in msgs[start + 1 :] for r in m.tool_results]
    if results:
        return say("answer: " + results[-1].content)
    words = msgs[start].text.split()
    if words[0] == "now":
        return call(use("time_get_current_time", {"timezone": words[1]}))
    if words[0] == "convert":
        args = {"source_timezone": words[1], "time": words[2], "target_timezone": words[3]}
        return call(use("time_convert_time", args))
    if words[0] == "whoami":
        return call(use("till_whoami", {}))
    return call(use("till_charge", {"amount": float(words[1]), "currency": words[2]}))
"""


@pytest.fixture(autouse=True)
def stop_servers() -> Iterator[None]:
    yield
    from loopengine.mcp.stdio import stop_servers

    stop_servers()


@pytest.fixture
def agents(tmp_path: Path) -> Path:
    root = tmp_path / "agents"
    write_agent(root, "clock", agent=CLOCK, rules=CLOCK_RULES, tools="TOOLS = []\n", script=SCRIPT)
    till = TILL.format(log=tmp_path / "till.log", crash=tmp_path / "crash")
    write_agent(root, "till", agent=till, rules=TILL_RULES, tools="TOOLS = []\n", script=SCRIPT)
    return root


@pytest.fixture
def make(tmp_path: Path, agents: Path) -> Iterator[Make]:
    built: list[Engine] = []

    def build(**extra: str) -> Engine:
        env = {"LOOPENGINE_DB": str(tmp_path / "stdio.db"), "LOOPENGINE_MODEL": "scripted"}
        env.update({"TILL_SECRET": SECRET, **extra})
        engine = build_engine({k: v for k, v in env.items() if v}, registry=AgentRegistry(None, [agents]))
        built.append(engine)
        return engine

    yield build
    for engine in built:
        engine.rt.stores.close()


def answer(engine: Engine, turn_id: str) -> Any:
    text = engine.outcome(turn_id).text or ""
    assert text.startswith("answer: "), text
    body = text.removeprefix("answer: ")
    try:
        return json.loads(body)
    except ValueError:
        return body


def children(word: str) -> list[int]:
    """This process's children whose command line holds ``word``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and word.encode() in cmdline:
            found.append(int(stat.parent.name))
    return found


def executions(tmp_path: Path) -> list[tuple[int, str]]:
    log = tmp_path / "till.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [(int(line.split()[0]), line.split()[1]) for line in lines]


def test_the_time_server_from_pypi_answers_under_the_rules(make: Make) -> None:
    engine = make()
    assert children("mcp-server-time") == []  # nothing starts before a turn needs it
    done = engine.send_message("clock", "now Asia/Tokyo")
    assert done.status is TurnStatus.FINISHED
    now = answer(engine, done.turn_id)
    assert now["timezone"] == "Asia/Tokyo" and now["datetime"].endswith("+09:00")
    (server,) = children("mcp-server-time")

    args = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    paused = engine.send_message("clock", "convert UTC 12:00 Asia/Tokyo")
    (item,) = paused.pending
    assert (paused.status, item.tool, item.args) == (TurnStatus.PAUSED, "time_convert_time", args)
    assert item.args_hash == args_hash("time_convert_time", args)
    snapshot = engine.rt.stores.turns.get_config(engine.turn(paused.turn_id).config_hash)
    assert snapshot is not None
    entry = next(t for t in snapshot["tools"] if t["name"] == "time_convert_time")
    assert entry["mcp"]["server"] == "time" and entry["mcp"]["tool"] == "convert_time"
    assert snapshot["mcp_servers"][0]["command"] == ["mcp-server-time", "--local-timezone", "UTC"]

    with pytest.raises(InvalidInput, match="target_timezone"):  # an edit is checked against the listing
        engine.resolve(item.pending_id, Approval(edited_args={"source_timezone": "UTC", "time": "1"}), ALICE)
    edited = {**args, "target_timezone": "Asia/Kolkata"}
    engine.resolve(item.pending_id, Approval(edited_args=edited), ALICE)
    said = answer(engine, paused.turn_id)
    assert said["reviewer_edited_args"] == edited
    converted = said["result"]
    assert converted["time_difference"] == "+5.5h", converted
    assert converted["target"]["datetime"].endswith("T17:30:00+05:30")
    assert children("mcp-server-time") == [server]  # one process served every listing and call


def test_a_server_that_crashes_mid_call_leaves_it_unknown_and_the_next_call_restarts_it(
    tmp_path: Path, make: Make
) -> None:
    engine = make()
    who = engine.send_message("till", "whoami")
    first = answer(engine, who.turn_id)
    assert first["token"] == "[redacted]" and SECRET not in json.dumps(engine.audit(who.turn_id))
    a = engine.send_message("till", "charge 12.5 USD")
    b = engine.send_message("till", "charge 3 EUR")
    (tmp_path / "crash").touch()

    engine.resolve(a.pending[0].pending_id, Approval(), ALICE)
    said = answer(engine, a.turn_id)
    assert said["status"] == "unknown" and "no answer came back" in said["reason"], said
    assert [c.outcome for c in engine.rt.stores.turns.calls(a.turn_id).values()] == ["unknown"]
    assert engine.outcome(a.turn_id).status is TurnStatus.FINISHED
    engine.resume(a.turn_id)  # nothing re-sends it
    assert executions(tmp_path) == [(first["pid"], "whoami"), (first["pid"], "charge")]

    engine.resolve(b.pending[0].pending_id, Approval(), ALICE)  # started again by this call
    charged = answer(engine, b.turn_id)
    assert charged["charged"] == 3.0 and charged["pid"] != first["pid"]
    assert executions(tmp_path)[2:] == [(charged["pid"], "charge")]
    assert children("tests.mcp_stdio_server") == [charged["pid"]]

    os.kill(charged["pid"], signal.SIGKILL)  # dies between calls: the next listing starts it again
    who = engine.send_message("till", "whoami")
    assert answer(engine, who.turn_id)["pid"] not in (first["pid"], charged["pid"])


def test_an_unset_secret_or_a_missing_program_refuses_the_turn(
    tmp_path: Path, make: Make, agents: Path
) -> None:
    with pytest.raises(AgentUnavailable, match="env TILL_TOKEN needs TILL_SECRET, which is not set"):
        make(TILL_SECRET="").send_message("till", "whoami")
    clock = agents / "clock" / "agent.yaml"
    clock.write_text(clock.read_text().replace("mcp-server-time,", "mcp-server-nowhere,"))
    with pytest.raises(AgentUnavailable, match=r"time MCP server is unreachable .*mcp-server-nowhere"):
        make().send_message("clock", "now UTC")
    assert executions(tmp_path) == []


EXITING = """\
import json, sys
from pathlib import Path
from loopengine.authoring.registry import AgentRegistry
from loopengine.bootstrap import build_engine

engine = build_engine(
    {"LOOPENGINE_DB": "exit.db", "LOOPENGINE_MODEL": "scripted", "TILL_SECRET": "s"},
    registry=AgentRegistry(None, [Path(sys.argv[1])]),
)
turn = engine.send_message("till", "whoami")
print(engine.outcome(turn.turn_id).text.removeprefix("answer: "), flush=True)
"""


def test_the_server_ends_with_the_process_that_started_it(tmp_path: Path, agents: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = tmp_path / "exiting.py"
    script.write_text(textwrap.dedent(EXITING))
    done = subprocess.run(
        [sys.executable, str(script), str(agents)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    pid = json.loads(done.stdout)["pid"]
    assert executions(tmp_path) == [(pid, "whoami")]
    assert not Path(f"/proc/{pid}").exists(), "the server outlived the process that started it"


def _said(port: int, message: str) -> Any:
    """What the till agent's script said of its call, the turn followed until it finished."""
    status, body = request(port, "POST", "/agents/till/messages", {"message": message})
    assert status in (200, 202), body
    deadline = time.monotonic() + 60  # a generous bound on a loaded machine, not a timing claim
    while body["status"] != "finished":
        assert time.monotonic() < deadline and body["status"] == "running", body
        time.sleep(0.1)
        status, body = request(port, "GET", f"/turns/{body['turnId']}")
    return json.loads(body["text"].removeprefix("answer: "))


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_in_loopengine_dev_an_environment_starts_it_and_stops_it_with_itself(
    tmp_path: Path, agents: Path
) -> None:
    env = admin_env(tmp_path / "dev.db", LOOPENGINE_AGENTS_PATH=str(agents), TILL_SECRET=SECRET)
    env["PYTHONPATH"] = str(ROOT)
    server = DevProcess(env, free_port(), tmp_path / "dev.log", args=("--workers", "1"))
    server.start()
    try:
        assert server.proc is not None and executions(tmp_path) == []  # not started by the warm-up
        who = _said(server.port, "whoami")
        assert who["token"] == "[redacted]"
        environment = who["ppid"]  # forked from the warmed server, which has no server of its own
        assert _ppid(environment) != server.proc.pid and _ppid(_ppid(environment)) == server.proc.pid
        assert _said(server.port, "whoami")["pid"] == who["pid"]  # reused
    finally:
        server.stop()
    assert server.proc is None and not Path(f"/proc/{who['pid']}").exists(), server.log_text()
