"""Bounded waits: at most N long-polls per principal (429 + Retry-After beyond), counted in the store.

Through the api handler on SQLite and DynamoDB (moto), and against a real ``loopengine dev``: the N+1-th
wait of a user is refused at once while resumes go on and ``/health`` keeps answering.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.app.request.waits import TooManyWaits
from loopengine.domain.principals import OPERATOR, Principal
from loopengine.http import api
from tests.agent_folders import write_agent
from tests.dev_support import AUTH, DevProcess, request
from tests.edge_support import STORES, Edge, installed, pause
from tests.handler_support import load_event
from tests.test_dev_reliability import _env, _serve, _until

LIMIT = 2


@pytest.fixture(params=STORES)
def edge(request: pytest.FixtureRequest, tmp_path: Path, handler_env: dict[str, str]) -> Iterator[Edge]:
    with installed(request.param, tmp_path) as made:
        made.engine.rt.max_waits = LIMIT
        yield made


def events(turn_id: str, wait: float, after: int = 10**6) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The turn's events after ``after`` (by default past the end: a wait really waits)."""
    event = load_event("turn_events", turnId=turn_id)
    event["rawQueryString"] = f"after={after}&wait={wait:g}"
    event["queryStringParameters"] = {"after": str(after), "wait": f"{wait:g}"}
    result = api.handler(event, _context())
    headers = {k.lower(): v for k, v in (result.get("headers") or {}).items()}
    return int(result["statusCode"]), json.loads(result["body"] or "{}"), headers


def _context() -> Any:
    from tests.handler_support import FakeContext

    return FakeContext()


def test_the_wait_beyond_the_limit_is_refused_and_slots_come_back(edge: Edge) -> None:
    turn_id = pause()["turnId"]  # parked: its events long-poll until the wait ends
    engine, alice = edge.engine, Principal("alice", "api", kind=OPERATOR)
    inside, release = threading.Semaphore(0), threading.Event()

    def held(_seconds: float) -> bool:  # the long-poll's pause: report in, then hold the slot
        inside.release()
        return release.wait(10)

    engine.sleep = held
    holders = [threading.Thread(target=lambda: engine.events(turn_id, 10**6, 2, alice)) for _ in range(LIMIT)]
    for t in holders:
        t.start()
    for _ in holders:
        assert inside.acquire(timeout=10)  # both hold their slot now

    with pytest.raises(TooManyWaits) as refused:
        engine.events(turn_id, 10**6, 2, alice)
    assert refused.value.retry_after >= 1
    engine.events(turn_id, 10**6, 0, alice)  # no wait, no slot: never limited
    release.set()
    for t in holders:
        t.join()
    engine.events(turn_id, 10**6, 0.1, alice)  # the slots were given back


def test_over_http_the_refusal_is_429_with_retry_after(edge: Edge) -> None:
    """(The api handler serves one event at a time per environment, so the limit is set to 0 here.)"""
    turn_id = pause()["turnId"]
    edge.engine.rt.max_waits = 0
    status, body, headers = events(turn_id, 2)
    assert (status, body["error"]) == (429, "too_many_waits"), body
    assert int(headers["retry-after"]) >= 1
    assert events(turn_id, 0)[0] == 200  # a read that does not wait is never refused


def test_another_principal_has_slots_of_its_own(edge: Edge) -> None:
    turn_id = pause()["turnId"]
    engine = edge.engine
    inside, release = threading.Semaphore(0), threading.Event()

    def hold(_s: float) -> None:
        inside.release()
        release.wait(10)

    engine.sleep = hold
    alice = Principal("alice", "api", kind=OPERATOR)
    held = [threading.Thread(target=lambda: engine.events(turn_id, 10**6, 1.5, alice)) for _ in range(LIMIT)]
    for t in held:
        t.start()
    for _ in held:
        assert inside.acquire(timeout=10)
    release.set()  # bob's own wait must not block the test
    bob = Principal("bob", "api", kind=OPERATOR)
    engine.events(turn_id, 10**6, 0.1, bob)  # not refused: alice's slots are hers
    for t in held:
        t.join()


def test_a_slot_left_by_a_dead_request_frees_itself(edge: Edge) -> None:
    turns = edge.engine.rt.stores.turns
    now = edge.engine.now()
    assert [turns.hold_wait("w_dead", LIMIT, now, now + 5) for _ in range(LIMIT)] == [0, 1]
    assert turns.hold_wait("w_dead", LIMIT, now, now + 5) is None
    assert turns.hold_wait("w_dead", LIMIT, now + 10, now + 15) is not None  # expired: free again


@pytest.mark.slow
def test_loopengine_dev_keeps_health_and_resumes_going_while_a_user_holds_every_wait(
    tmp_path: Path, servers: list[DevProcess]
) -> None:
    write_agent(tmp_path / "agents", "shop")
    env = _env(tmp_path, LOOPENGINE_MAX_WAITS=str(LIMIT))
    srv = _serve(servers, env, tmp_path / "dev.log", "--sweep-interval", "0", "--workers", "4")
    status, paused = request(srv.port, "POST", "/agents/shop/messages", {"message": "refund A-1001"})
    assert status == 202 and paused["status"] == "paused", paused
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    path = f"/turns/{turn_id}/events?after=1000000&wait=12"
    failures: list[BaseException] = []

    def hold() -> None:
        try:
            request(srv.port, "GET", path)
        except BaseException as exc:  # reported below, never lost in the thread
            failures.append(exc)

    holders = [threading.Thread(target=hold) for _ in range(LIMIT)]
    for t in holders:
        t.start()
    try:
        time.sleep(3)  # the holders take their slots (a probe now could take one from them)
        refused = request(srv.port, "GET", f"/turns/{turn_id}/events?after=1000000&wait=0.2")
        assert (refused[0], refused[1].get("error")) == (429, "too_many_waits"), refused

        started = time.monotonic()
        assert request(srv.port, "GET", "/health")[0] == 200
        approve = {"decision": "approve"}
        status, resolved = request(srv.port, "POST", f"/pending-approvals/{pending}/resolve", approve)
        assert status in (200, 202), resolved
        assert time.monotonic() - started < 5.0  # neither waited behind the held long-polls
    finally:
        for t in holders:
            t.join(timeout=30)  # the approval's events end the held long-polls
    assert not failures


def _get(port: int, path: str, auth: str) -> tuple[int, dict[str, str], dict[str, Any]]:
    """GET ``path``: status, headers (lower-cased) and JSON body, whatever the status."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": auth})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, {k.lower(): v for k, v in err.headers.items()}, json.loads(err.read())


@pytest.mark.slow
def test_under_loopengine_dev_one_principals_waits_never_hold_up_another_principal(
    tmp_path: Path, servers: list[DevProcess]
) -> None:
    # GIVEN loopengine dev with 2 environments, a limit of LIMIT waits per principal, and a parked turn
    write_agent(tmp_path / "agents", "shop")
    bob = {"user": "bob", "password": "pw-bob", "tenants": [""]}
    env = _env(tmp_path, LOOPENGINE_MAX_WAITS=str(LIMIT), LOOPENGINE_USERS=json.dumps([bob]))
    srv = _serve(servers, env, tmp_path / "dev.log", "--sweep-interval", "0", "--workers", "2")
    status, paused = request(srv.port, "POST", "/agents/shop/messages", {"message": "refund A-1001"})
    assert status == 202 and paused["status"] == "paused", paused
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    cursor = request(srv.port, "GET", f"/turns/{turn_id}/events")[1]["next"]
    waits = 4 * LIMIT  # four times what one principal may hold, twice the environments started
    answers: list[tuple[int, dict[str, str], dict[str, Any]]] = []

    def hold() -> None:
        try:
            answers.append(_get(srv.port, f"/turns/{turn_id}/events?after={cursor}&wait=15", AUTH))
        except BaseException as exc:  # reported below, never lost in the thread
            answers.append((0, {}, {"error": repr(exc)}))

    # WHEN the admin opens that many long-polls at once
    holders = [threading.Thread(target=hold) for _ in range(waits)]
    for t in holders:
        t.start()
    try:
        # THEN every wait beyond the limit is refused at once: 429 too_many_waits, with Retry-After
        _until("the waits beyond the limit to be refused", lambda: len(answers) >= waits - LIMIT or None)
        refused = list(answers)
        assert [(s, b.get("error")) for s, _, b in refused] == [(429, "too_many_waits")] * (waits - LIMIT)
        assert all(int(h["retry-after"]) >= 1 for _, h, _ in refused)
        # AND another principal's ordinary request is answered while the admin's waits hold
        bobs = "Basic " + base64.b64encode(b"bob:pw-bob").decode()
        status, _, listed = _get(srv.port, "/pending-approvals", bobs)
        assert status == 200 and [i["pendingId"] for i in listed["items"]] == [pending], listed
        assert len(answers) == waits - LIMIT  # none of the admin's held waits had ended meanwhile
    finally:
        approve = {"decision": "approve"}  # its events end the held waits
        request(srv.port, "POST", f"/pending-approvals/{pending}/resolve", approve)
        for t in holders:
            t.join(timeout=60)
    held = answers[waits - LIMIT :]
    assert [s for s, _, _ in held] == [200] * LIMIT and all(b["events"] for _, _, b in held), held
