"""Config pinning, checked from fresh processes (no per-process cache can mask a broken pin).

A turn pauses in one process; the rules file is edited; a *new* process resolves it: the turn goes
on under the rules it started with, while a new turn (yet another process) runs under the new ones.
And ``loopengine dev`` with several workers serves the edited config from every worker at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.agent_folders import calls, write_agent
from tests.dev_support import DevProcess, free_port, request

ROOT = Path(__file__).resolve().parent.parent
ALLOW_ALL = "rules: []\ndefault_decision: allow\n"


def fresh_process(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.pinning_worker", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_turn_resumed_in_a_fresh_process_keeps_the_rules_it_started_with(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "agents", "shop")  # rules v1: every refund asks
    env = {
        **os.environ,
        "LOOPENGINE_DB": str(tmp_path / "pin.db"),
        "LOOPENGINE_AGENTS_PATH": str(tmp_path / "agents"),
        "LOOPENGINE_MODEL": "scripted",
    }
    env.pop("LOOPENGINE_TABLE", None)
    env.pop("LOOPENGINE_DEFAULT_WEBHOOK_URL", None)

    first = fresh_process(env, "send", "shop", "refund please")
    assert first["status"] == "paused" and first["pending"][0]["args"] == {"x": 1}

    (folder / "rules.yaml").write_text(ALLOW_ALL)  # publish v2: everything allowed

    resumed = fresh_process(env, "resolve", first["pending"][0]["pendingId"], first["turnId"])
    assert resumed["status"] == "paused", "the second refund still asks: the turn runs under v1"
    assert resumed["pending"][0]["args"] == {"x": 2}
    assert resumed["configHash"] == first["configHash"]
    assert calls(folder) == [1]

    new = fresh_process(env, "send", "shop", "another refund")
    assert (new["status"], new["text"]) == ("finished", "all done"), "a new turn runs under v2"
    assert new["configHash"] != first["configHash"]
    assert calls(folder) == [1, 1, 2]


def test_every_dev_worker_serves_the_edited_config(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "agents", "shop")
    env = {
        **os.environ,
        "LOOPENGINE_DB": str(tmp_path / "dev.db"),
        "LOOPENGINE_ADMIN_AUTH": "admin:secret",
        "LOOPENGINE_MODEL": "scripted",
        "LOOPENGINE_AGENTS_PATH": str(tmp_path / "agents"),
    }
    env.pop("LOOPENGINE_TABLE", None)
    env.pop("LOOPENGINE_DEFAULT_WEBHOOK_URL", None)
    server = DevProcess(env, free_port(), tmp_path / "dev.log")
    server.start()
    try:
        for _ in range(8):  # every worker loads (and would cache) v1
            status, body = request(server.port, "POST", "/agents/shop/messages", {"message": "refund"})
            assert (status, body["status"]) == (202, "paused"), body
        (folder / "rules.yaml").write_text(ALLOW_ALL)
        for _ in range(8):
            status, body = request(server.port, "POST", "/agents/shop/messages", {"message": "refund"})
            assert (status, body["status"]) == (200, "finished"), body
        (folder / "rules.yaml").write_text("rules: [\n")
        for _ in range(4):
            status, body = request(server.port, "POST", "/agents/shop/messages", {"message": "refund"})
            assert (status, body["error"]) == (503, "agent_unavailable"), body
            assert "shop/rules.yaml:2: YAML syntax error" in body["message"]
        status, body = request(
            server.port,
            "POST",
            "/agents/customer-service/messages",
            {"message": "Order A-1001 arrived broken."},
        )
        assert status == 202, body
    finally:
        server.stop()
