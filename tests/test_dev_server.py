"""``loopengine dev``: a real HTTP server on 127.0.0.1 in front of the api handler."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dev_support import DevProcess, free_port, request


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevProcess]:
    env = {
        **os.environ,
        "LOOPENGINE_DB": str(tmp_path / "dev.db"),
        "LOOPENGINE_ADMIN_AUTH": "admin:secret",
        "LOOPENGINE_MODEL": "scripted",
    }
    env.pop("LOOPENGINE_TABLE", None)
    env.pop("LOOPENGINE_DEFAULT_WEBHOOK_URL", None)
    srv = DevProcess(env, free_port(), args=("--workers", "4"))  # concurrent clicks and requests
    srv.start()
    yield srv
    srv.stop()


def _pause(port: int) -> dict[str, Any]:
    status, body = request(
        port, "POST", "/agents/customer-service/messages", {"message": "Order A-1001 arrived broken."}
    )
    assert status == 202, body
    return body


def test_full_contract_over_http(server: DevProcess) -> None:
    paused = _pause(server.port)
    first = paused["pendingItems"][0]["pendingId"]
    status, body = request(
        server.port, "POST", f"/pending-approvals/{first}/resolve?wait=10", {"decision": "approve"}
    )
    assert status == 202 and body["status"] == "paused"
    [email] = body["pendingItems"]
    assert email["tool"] == "send_email"
    status, body = request(
        server.port,
        "POST",
        f"/pending-approvals/{email['pendingId']}/resolve?wait=10",
        {"decision": "approve"},
    )
    assert status == 200 and body["status"] == "finished" and body["stopReason"] == "end_turn"
    status, turn = request(server.port, "GET", f"/turns/{paused['turnId']}")
    assert turn["status"] == "finished"
    status, _ = request(server.port, "GET", "/no/such/route")
    assert status == 404


def test_five_concurrent_clicks_one_decides(server: DevProcess) -> None:
    paused = _pause(server.port)
    pending = paused["pendingItems"][0]["pendingId"]
    barrier = threading.Barrier(5)
    answers: list[tuple[int, dict[str, Any]]] = []
    lock = threading.Lock()

    def click() -> None:
        barrier.wait()
        got = request(server.port, "POST", f"/pending-approvals/{pending}/resolve", {"decision": "approve"})
        with lock:
            answers.append(got)

    threads = [threading.Thread(target=click) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    decided = [b for s, b in answers if b.get("resolved")]
    already = [b for s, b in answers if b.get("alreadyResolved")]
    assert len(decided) == 1 and len(already) == 4, answers


@pytest.mark.slow
def test_parked_turn_survives_a_restart(server: DevProcess) -> None:
    paused = _pause(server.port)
    pending = paused["pendingItems"][0]["pendingId"]
    server.stop()
    server.start()
    status, body = request(
        server.port, "POST", f"/pending-approvals/{pending}/resolve?wait=10", {"decision": "approve"}
    )
    assert status == 202 and body["status"] == "paused"
    assert body["turnId"] == paused["turnId"] and body["pendingItems"][0]["tool"] == "send_email"


def test_concurrent_requests_never_see_each_others_event(server: DevProcess) -> None:
    # Powertools keeps the current event in shared state: the server must hand the handler one
    # event at a time, or a request can be answered with another request's path or body.
    turns = [_pause(server.port)["turnId"] for _ in range(2)]
    crossed: list[str] = []

    def read(turn_id: str) -> None:
        for _ in range(150):
            status, body = request(server.port, "GET", f"/turns/{turn_id}")
            if status != 200 or body.get("turnId") != turn_id:
                crossed.append(f"{turn_id}: {status} {body.get('turnId') or body}")

    threads = [threading.Thread(target=read, args=(t,)) for t in turns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert crossed == []
