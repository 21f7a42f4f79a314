"""``kill -9`` of ``loopengine dev`` during its sweep strands no refund as ``unknown`` (issue 28).

Thirty refunds are approved while their resume invokes are lost, so the next ``loopengine dev``'s
first sweep finds all thirty due at once. It hands them on in bounded batches; the environment's
eight local workers each claim one and start its refund (a payment API that has not answered yet);
then the server and every environment are killed with SIGKILL. A new server's sweep recovers the
rest. Every turn finished ``end_turn``, every refund ran exactly once, and the refunds reported
``unknown`` are exactly the eight whose bodies had started: a turn the sweep handed on but no worker
claimed yet is not claimed, so it runs after the restart (the tool's first act writes a line to a
file, the side effect's evidence).

A kill at an arbitrary instant can still fall between a claim's commit and its body's first
instruction (no store operation or I/O there, only the worker's own CPU work): recovery cannot
tell that call from one whose body had started, and reports it ``unknown`` (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopengine.app.invokers import ThreadInvoker
from loopengine.app.request.resolution import Decider
from loopengine.bootstrap import build_engine
from loopengine.domain.decisions import Approval
from loopengine.domain.messages import Message, check_protocol
from tests.agent_folders import BLOCKING_TOOLS_PY, write_agent
from tests.dev_support import DevProcess, free_port, request

pytestmark = pytest.mark.slow  # real processes, seconds: make test runs these first

REFUNDS = 30
LOCAL_WORKERS = ThreadInvoker().max_running
"""The resumes one ``loopengine dev`` environment runs at once (8): the sweep's other turns wait."""
FAST = {"LOOPENGINE_LEASE_SECONDS": "2", "LOOPENGINE_HANDOFF_GRACE_SECONDS": "1"}

TOOLS = BLOCKING_TOOLS_PY.format(tool="refund", description="Refund an order.", result="refunded")

SCRIPT = """\
from loopengine.models.scripted import call, say, use


def respond(request):
    last = request.messages[-1]
    if last.tool_results:
        return say("refund: " + last.tool_results[0].content)
    return call(use("refund", {"x": int(last.text.rsplit(" ", 1)[-1])}))
"""


class LostInvoker:
    """Lambda refused every async invoke: the approved turns wait, due, for the sweep."""

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        raise RuntimeError("the resume invoke was lost")


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}
    return {
        **env,
        "LOOPENGINE_DB": str(tmp_path / "dev.db"),
        "LOOPENGINE_ADMIN_AUTH": "admin:secret",
        "LOOPENGINE_AGENTS_PATH": str(tmp_path / "agents"),
        "LOOPENGINE_MODEL": "scripted",
        "LOOPENGINE_SCRIPTED_DELAY": "0",
        **FAST,
    }


def _serve(servers: list[DevProcess], env: dict[str, str], log: Path, *args: str) -> DevProcess:
    srv = DevProcess(env, free_port(), log, ("--workers", "2", *args))
    srv.start()
    servers.append(srv)
    return srv


def _until(what: str, check: Callable[[], Any], timeout: float = 120.0) -> Any:
    """Poll ``check`` until it returns something truthy (a generous timeout, not a timing claim)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _ran(folder: Path) -> list[int]:
    """The refunds whose bodies started, in any process (the tool's first act writes the line)."""
    log = folder / "started.log"
    return [int(x) for x in log.read_text().split()] if log.exists() else []


def test_kill_9_during_the_sweep_strands_no_refund_as_unknown(
    tmp_path: Path, servers: list[DevProcess]
) -> None:
    folder = write_agent(
        tmp_path / "agents",
        "refunder",
        agent="name: refunder\nmodel: test-model\nsystem: You refund orders.\ntools: [refund]\n",
        rules="rules:\n  - tool: refund\n    decision: ask\n",
        tools=TOOLS,
        script=SCRIPT,
    )
    env, log = _env(tmp_path), tmp_path / "dev.log"
    first = _serve(servers, env, log, "--sweep-interval", "0")
    turns: dict[int, tuple[str, str, str]] = {}  # x -> (turn, session, pending item)
    for x in range(1, REFUNDS + 1):
        status, body = request(first.port, "POST", "/agents/refunder/messages", {"message": f"refund {x}"})
        assert status == 202 and body["status"] == "paused", body
        turns[x] = (body["turnId"], body["sessionId"], body["pendingItems"][0]["pendingId"])
    first.stop()

    approver = build_engine(env, invoker=LostInvoker())  # approved; every resume invoke lost
    try:
        for _turn, _session, pending in turns.values():
            assert not approver.resolve(pending, Approval(), Decider("ops@example.com")).already_resolved
    finally:
        approver.close()
    assert _ran(folder) == []
    time.sleep(1.0)  # the hand-off grace (1 s here): the sweep's promise starts after it

    second = _serve(servers, env, log, "--sweep-interval", "1")  # its first sweep runs at once
    _until("every local worker to be inside a refund", lambda: len(_ran(folder)) >= LOCAL_WORKERS)
    second.kill()  # the server and every environment, mid-sweep: the other turns wait unclaimed
    at_kill = _ran(folder)
    assert len(at_kill) == LOCAL_WORKERS, at_kill
    (folder / "release").touch()  # the payment API answers from now on

    third = _serve(servers, env, log, "--sweep-interval", "1")

    def finished() -> list[dict[str, Any]] | None:
        bodies = [request(third.port, "GET", f"/turns/{turn}")[1] for turn, _s, _p in turns.values()]
        return bodies if all(b["status"] == "finished" for b in bodies) else None

    bodies = _until("every turn to come to rest", finished)
    ran = Counter(_ran(folder))
    assert [x for x, n in ran.items() if n > 1] == [], "a refund ran twice"
    assert sorted(ran) == list(turns), "every approved refund ran"
    assert [b["stopReason"] for b in bodies] == ["end_turn"] * REFUNDS
    unknown = []
    for x, (_turn, session, _pending) in turns.items():
        status, body = request(third.port, "GET", f"/sessions/{session}")
        assert status == 200, body
        history = [Message.from_dict(m) for m in body["messages"]]
        check_protocol(history)
        (result,) = [r for m in history for r in m.tool_results]
        if json.loads(result.content).get("status") == "unknown":
            unknown.append(x)
    print(f"\nkilled with refunds {at_kill} running; reported unknown: {unknown}")
    assert sorted(unknown) == sorted(at_kill), "unknown is exactly the refunds whose bodies had started"
