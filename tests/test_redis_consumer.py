"""The redis channel end to end: ``loopengine dev`` pushes, a worker pops and resolves through the API.

One real redis-server (password-protected; the agents name it with ``url_env``) and one
``loopengine dev`` per test module, with two agent folders loaded from ``LOOPENGINE_AGENTS_PATH``:
``shop`` pushes to a list, ``desk`` adds to a stream. Each test drives a fresh turn; a worker
(:mod:`loopengine.channels.redis.consume`) pops what the server pushed and decides it with the
admin's credentials over HTTP. Skipped, with the reason, only where redis-server is not installed.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from redis import Redis

from loopengine.authoring.tools import args_hash
from loopengine.channels.redis.consume import RedisQueue, connect, consume_once
from loopengine.channels.redis.resolve import ApiResolver, Entry, ResolveError, Verdict, basic_auth
from loopengine.channels.redis.signed import sealed
from tests.agent_folders import AGENT_YAML, calls, write_agent
from tests.dev_support import AUTH, DevProcess, admin_env, free_port, request
from tests.redis_support import RedisServer

PASSWORD = "redis-password-do-not-leak-0123456789"
SECRET = "redis-signing-secret-do-not-leak-42"
NOTIFIER = """\
notifier:
  channel: redis
  config: {{url_env: SHOP_REDIS_URL, secret_env: SHOP_REDIS_SECRET, key: "{key}", mode: {mode}}}
  events: [approval, question]
"""
OPTIONS = ["refund", "replacement"]
ASK_SCRIPT = f"""\
from loopengine.models.scripted import call, say, use


def respond(request):
    if not any(m.tool_results for m in request.messages):
        return call(use("system_ask_user", {{"question": "Refund or replacement?", "options": {OPTIONS!r}}}))
    return say("noted")
"""


@dataclass
class Stack:
    dev: DevProcess
    redis: RedisServer
    agents: Path

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.dev.port}"

    def client(self) -> Redis:
        return redis.Redis(host="127.0.0.1", port=self.redis.port, password=PASSWORD, socket_timeout=30)

    def queue(self, key: str, mode: str = "list", consumer: str = "worker-1") -> RedisQueue:
        client = connect(self.redis.url(PASSWORD))
        return RedisQueue(client, key, secret=SECRET, mode=mode, consumer=consumer)  # type: ignore[arg-type]

    def message(self, agent: str) -> dict[str, Any]:
        """A fresh turn of ``agent``, paused on its first item."""
        status, body = request(
            self.dev.port, "POST", f"/agents/{agent}/messages", {"message": "refund please"}
        )
        assert status == 202 and body["status"] == "paused", body
        return body


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("redis-e2e")
    server = RedisServer(root / "redis", password=PASSWORD).start()
    agents = root / "agents"
    for name, key, mode in (("shop", "shop:approvals", "list"), ("desk", "desk:approvals", "stream")):
        write_agent(agents, name, agent=AGENT_YAML.format(name=name) + NOTIFIER.format(key=key, mode=mode))
    asks = AGENT_YAML.format(name="asker") + NOTIFIER.format(key="asker:questions", mode="list")
    write_agent(agents, "asker", agent=asks, script=ASK_SCRIPT)
    env = admin_env(
        root / "dev.db",
        LOOPENGINE_AGENTS_PATH=str(agents),
        SHOP_REDIS_URL=server.url(PASSWORD),
        SHOP_REDIS_SECRET=SECRET,
    )
    dev = DevProcess(env, free_port(), root / "dev.log")
    dev.start()
    try:
        yield Stack(dev, server, agents)
    finally:
        dev.stop()
        server.kill()
        assert PASSWORD not in dev.log_text() and SECRET not in dev.log_text()


def approve(entry: Entry) -> Verdict:
    return Verdict.approve(comment=f"worker saw {entry.body['args']}")


def test_a_worker_resolves_what_it_pops_and_the_turn_finishes(stack: Stack) -> None:
    turn = stack.message("shop")
    queue, api = stack.queue("shop:approvals"), ApiResolver(stack.api, AUTH, wait=10)

    first = consume_once(queue, api, approve, timeout=5)
    assert first is not None and first.outcome == "resolved", first
    assert first.entry.pending_id == turn["pendingItems"][0]["pendingId"]
    # the resume ran within the wait: it paused again on the second refund, which was pushed too
    assert first.answer["status"] == "paused" and first.answer["turnId"] == turn["turnId"]

    second = consume_once(queue, api, approve, timeout=5)
    assert second is not None and second.outcome == "resolved"
    assert second.entry.body["args"] == {"x": 2}
    assert (second.answer["status"], second.answer["text"]) == ("finished", "all done")
    assert calls(stack.agents / "shop") == [1, 2]

    status, seen = request(stack.dev.port, "GET", f"/turns/{turn['turnId']}")
    assert status == 200 and (seen["status"], seen["stopReason"]) == ("finished", "end_turn")
    decided = [e for e in seen["audit"] if e["type"] == "decided"]
    assert [d["decidedBy"] for d in decided] == ["user:admin", "user:admin"]
    assert consume_once(queue, api, approve, timeout=0.2) is None  # nothing left


class Trap(http.server.BaseHTTPRequestHandler):
    """A server an attacker controls: it records every request (and any credentials in it)."""

    seen: list[tuple[str, str | None]] = []

    def do_POST(self) -> None:
        Trap.seen.append((self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"resolved": true}')

    def log_message(self, *args: Any) -> None:
        return


def test_duplicates_and_tampered_entries_decide_nothing_twice_or_elsewhere(stack: Stack) -> None:
    trap = http.server.HTTPServer(("127.0.0.1", 0), Trap)
    threading.Thread(target=trap.serve_forever, daemon=True).start()
    try:
        turn = stack.message("shop")
        r = stack.client()
        [raw] = _pushed(r, "shop:approvals")
        body = json.loads(raw)
        body["resolveUrl"] = f"http://127.0.0.1:{trap.server_port}/steal"  # where credentials would go
        r.lset("shop:approvals", 0, json.dumps(body, separators=(",", ":")))
        r.rpush("shop:approvals", raw, raw)  # the genuine entry, then a duplicate delivery of it
        queue, api = stack.queue("shop:approvals"), ApiResolver(stack.api, AUTH, wait=10)

        altered = consume_once(queue, api, approve, timeout=5)  # its signature no longer verifies
        assert altered is not None and altered.outcome == "forged" and altered.status is None
        assert "bad_signature" in (altered.entry.problem or "")
        resolved = consume_once(queue, api, approve, timeout=5)
        assert resolved is not None and resolved.outcome == "resolved"
        assert Trap.seen == []  # the worker's own API URL, never an entry's resolveUrl
        duplicate = consume_once(queue, api, approve, timeout=5)
        assert duplicate is not None and duplicate.outcome == "duplicate"
        assert duplicate.entry.event_id == resolved.entry.event_id

        # the second pause's entry, forged in Redis (other arguments, their hash, a fresh eventId;
        # resigned with a guessed secret, or not signed at all): refused unread, no request sent
        [raw2] = _pushed(r, "shop:approvals")  # the resume pauses again and notifies after its write
        forged = {k: v for k, v in json.loads(raw2).items() if k != "signature"}
        forged.update(args={"x": 999}, argsHash=args_hash("refund", {"x": 999}), eventId="evt_" + "f" * 32)
        unsigned = json.dumps(forged, separators=(",", ":"))
        guessed, _ = sealed("guessed-secret", unsigned, int(time.time()))
        r.delete("shop:approvals")
        r.rpush("shop:approvals", unsigned, guessed)
        for _ in range(2):
            refused = consume_once(queue, api, approve, timeout=5)
            assert refused is not None and refused.outcome == "forged", refused
        assert calls(stack.agents / "shop")[-1] != 999
        _, open_items = request(stack.dev.port, "GET", "/pending-approvals?agent=shop")
        assert forged["pendingId"] in [i["pendingId"] for i in open_items["items"]]  # still open
        assert turn["turnId"] in [i["turnId"] for i in open_items["items"]]
    finally:
        trap.shutdown()
        trap.server_close()


def test_a_question_takes_one_of_its_options_and_a_forged_answer_decides_nothing(stack: Stack) -> None:
    turn = stack.message("asker")
    r = stack.client()
    [raw] = _pushed(r, "asker:questions")
    assert json.loads(raw)["options"] == OPTIONS
    # a forged copy offering the attacker's own option (and a fresh eventId): refused unread
    forged = {k: v for k, v in json.loads(raw).items() if k != "signature"}
    forged.update(options=[*OPTIONS, "gift card"], eventId="evt_" + "e" * 32)
    r.lpush("asker:questions", json.dumps(forged, separators=(",", ":")))
    queue, api = stack.queue("asker:questions"), ApiResolver(stack.api, AUTH, wait=10)
    gift = consume_once(queue, api, lambda _e: Verdict.reply("gift card"), timeout=5)
    assert gift is not None and gift.outcome == "forged"

    # the genuine entry, answered with something that is not among its options: the API refuses
    r.rpush("asker:questions", raw)
    free = consume_once(queue, api, lambda _e: Verdict.reply("gift card"), timeout=5)
    assert free is not None and (free.outcome, free.status) == ("refused", 400), free
    assert free.answer["error"] == "invalid_input" and '"refund", "replacement"' in free.answer["message"]
    pending = turn["pendingItems"][0]["pendingId"]
    _, listed = request(stack.dev.port, "GET", "/pending-approvals?agent=asker")
    assert pending in [i["pendingId"] for i in listed["items"]]  # still open: nothing was recorded

    r.rpush("asker:questions", raw)  # the genuine entry, delivered once more, answered with an option
    queue.client.delete(f"asker:questions:seen:{json.loads(raw)['eventId']}")  # (not a duplicate)
    chosen = consume_once(queue, api, lambda _e: Verdict.reply("replacement"), timeout=5)
    assert chosen is not None and chosen.outcome == "resolved", chosen
    assert (chosen.answer["status"], chosen.answer["text"]) == ("finished", "noted")


def _pushed(r: redis.Redis, key: str, timeout: float = 30.0) -> list[bytes]:
    """The entries of list ``key`` once there is one: the notifier pushes after the write it announces."""
    deadline = time.monotonic() + timeout
    while not (found := r.lrange(key, 0, -1)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return list(found)  # type: ignore[arg-type]


def test_a_stream_keeps_an_entry_until_the_api_took_it(stack: Stack) -> None:
    turn = stack.message("desk")
    queue = stack.queue("desk:approvals", mode="stream")
    down = ApiResolver(f"http://127.0.0.1:{free_port()}", AUTH)  # nothing listens there
    with pytest.raises(ResolveError) as caught:
        consume_once(queue, down, approve, timeout=5)
    assert caught.value.retryable and caught.value.status is None
    r = stack.client()
    assert r.xpending("desk:approvals", "loopengine")["pending"] == 1  # unacknowledged, not lost

    api = ApiResolver(stack.api, AUTH, wait=10)
    again = consume_once(queue, api, approve, timeout=5)  # this worker's unacknowledged entry first
    assert again is not None and again.outcome == "resolved"
    assert again.entry.pending_id == turn["pendingItems"][0]["pendingId"]
    assert r.xpending("desk:approvals", "loopengine")["pending"] == 0
    other = consume_once(stack.queue("desk:approvals", "stream", consumer="worker-2"), api, approve, 5)
    assert other is not None and other.entry.body["args"] == {"x": 2}  # only the new entry
    assert other.answer["status"] == "finished"


def test_wrong_credentials_keep_the_entry(stack: Stack) -> None:
    stack.message("shop")
    queue = stack.queue("shop:approvals")
    wrong = ApiResolver(stack.api, basic_auth("admin:wrong"))
    with pytest.raises(ResolveError) as caught:
        consume_once(queue, wrong, approve, timeout=5)
    assert caught.value.status == 401 and caught.value.retryable
    [kept] = stack.client().lrange("shop:approvals", 0, -1)
    assert json.loads(kept)["event"] == "approval"
    later = consume_once(queue, ApiResolver(stack.api, AUTH, wait=10), approve, timeout=5)
    assert later is not None and later.outcome == "resolved"
    assert later.answer["status"] == "paused"  # on the chained second refund, pushed by now
    stack.client().delete("shop:approvals")  # which is not this test's


def test_the_terminal_worker_decides_by_hand(stack: Stack) -> None:
    turn = stack.message("shop")
    env = {
        **os.environ,
        "LOOPENGINE_REDIS_URL": stack.redis.url(PASSWORD),
        "LOOPENGINE_REDIS_SECRET": SECRET,
        "LOOPENGINE_API_AUTH": "admin:secret",
    }
    command = [sys.executable, "-m", "loopengine.channels.redis.consume", "--api", stack.api]
    command += ["--key", "shop:approvals", "--once"]
    done = subprocess.run(
        command, input="a\n", env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert (
        "wants to call refund" in done.stdout and "resolved" in done.stdout and turn["turnId"] in done.stdout
    )
    assert PASSWORD not in done.stdout + done.stderr and SECRET not in done.stdout + done.stderr
    _, seen = request(stack.dev.port, "GET", f"/turns/{turn['turnId']}")
    assert [e["decision"] for e in seen["audit"] if e["type"] == "decided"] == ["approve"], done.stdout
