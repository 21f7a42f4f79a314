"""The ``redis`` notifier channel against a real ``redis-server`` (tests/redis_support.py).

An Engine on SQLite with the scripted model pauses for real; its notifier is built the way an
agent's ``notifier:`` block builds it (the bootstrap's NotifierChooser), and delivery goes through
the outbox (written with the pause, retried by the sweep). What arrived is read back from Redis
with redis-py. The consumer (tests/test_redis_consumer.py) resolves through ``loopengine dev``.
Skipped, with the reason in pytest's summary, only where redis-server is not installed.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from loopengine.app.engine import Engine
from loopengine.app.invokers import InlineInvoker
from loopengine.app.outcome import TurnOutcome
from loopengine.app.ports import Notification
from loopengine.app.runtime import Runtime
from loopengine.app.worker.batch import pending_notification
from loopengine.authoring.tools import ASK_USER
from loopengine.bootstrap import NotifierChooser
from loopengine.channels import base as channels
from loopengine.channels.base import notification_body
from loopengine.channels.redis.send import RedisNotifier, client_for
from loopengine.channels.redis.signed import opened
from loopengine.channels.signing import RejectReason, WebhookVerificationError
from loopengine.domain import outbox
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import ConfigError, DeliveryError
from loopengine.domain.decisions import Approval
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.models.scripted import ScriptedModel, call, say, use
from loopengine.stores.sqlite import open_sqlite_stores
from tests.harness import Calls, StaticAgents, agent
from tests.redis_support import LostReplyProxy, RedisServer, make_tls

KEY = "loopengine:approvals"
PASSWORD = "redis-password-do-not-leak-0123456789"
SECRET = "redis-signing-secret-do-not-leak-42"
SIGNING = {"REDIS_SECRET": SECRET}
"""The environment a notifier block's ``secret_env: REDIS_SECRET`` names."""
WEEK = 7 * 24 * 3600
REFUND_ARGS = {"order_id": "A-1001", "amount": 212.0, "reason": "arrived broken"}
REFUND_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "number"},
        "reason": {"type": "string"},
    },
    "required": ["order_id", "amount"],
}
RULES = {"rules": [{"tool": "issue_refund", "decision": "ask", "reason": "refunds need a human"}]}
QUESTION = {"question": "Refund or replacement?", "options": ["refund", "replacement"]}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    s = RedisServer(tmp_path / "redis").start()
    yield s
    s.kill()


def reader(server: RedisServer, password: str | None = None) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port, password=password, socket_timeout=5)


@contextmanager
def deployed(
    tmp_path: Path, config: dict[str, Any], env: dict[str, str], events: list[str], script: list[Any]
) -> Iterator[tuple[Engine, Calls, FakeClock]]:
    """An Engine whose agent ``shop`` notifies through ``channel: redis`` with ``config``."""
    clock, calls = FakeClock(), Calls()
    config, env = {"secret_env": "REDIS_SECRET", **config}, {**SIGNING, **env}
    block = {"channel": "redis", "config": config, "events": events}
    shop = agent("shop", [calls.tool("issue_refund", REFUND_SCHEMA)], RULES, notifier=block)
    stores = open_sqlite_stores(str(tmp_path / "engine.db"), clock)
    invoker = InlineInvoker()
    rt = Runtime(
        stores=stores,
        agents=StaticAgents(shop),
        model_for=lambda _c: ScriptedModel.from_list(script),
        notifier_for=NotifierChooser(env, clock),
        invoker=invoker,
        public_url="https://loop.example.test",
    )
    engine = Engine(rt)
    invoker.resume = engine.resume
    try:
        yield engine, calls, clock
    finally:
        stores.close()


REFUND_SCRIPT = [call(use("issue_refund", REFUND_ARGS)), say("Refund issued.")]
QUESTION_SCRIPT = [call(use(ASK_USER, QUESTION)), say("Thanks.")]


def body_of(raw: bytes | str, clock: FakeClock) -> bytes:
    """The webhook body a signed list entry carries, its signature verified (the consumer's check)."""
    assert isinstance(raw, bytes)  # the readers do not decode responses
    return opened(SECRET, raw, tolerance=WEEK, now=clock.now())


def audit(engine: Engine, turn_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in engine.rt.stores.turns.events(turn_id) if e["type"] == kind]


def webhook_bytes(engine: Engine, out: TurnOutcome, event_id: str) -> bytes:
    """What the webhook channel would POST for the turn's pending item, byte for byte."""
    turn = engine.rt.stores.turns.get_turn(out.turn_id)
    assert turn is not None
    [item] = out.pending
    note = pending_notification(engine.rt, turn, item)
    event, payload = note.event, note.payload()
    return notification_body(Notification(event, {"eventId": event_id, **payload})).encode()


# -- what arrives -----------------------------------------------------------------------------------


def test_an_approval_pause_pushes_exactly_one_entry_holding_the_webhook_body(
    tmp_path: Path, server: RedisServer
) -> None:
    config = {"url": server.url(), "key": KEY}
    with deployed(tmp_path, config, {}, ["approval", "question"], REFUND_SCRIPT) as (engine, calls, clock):
        out = engine.send_message("shop", "order A-1001 arrived broken")
        assert out.stop_reason is StopReason.PENDING_APPROVAL
        [raw] = reader(server).lrange(KEY, 0, -1)
        [notified] = audit(engine, out.turn_id, "notified")
        assert notified["channel"] == f"redis list {KEY} at 127.0.0.1:{server.port}/0"
        assert body_of(raw, clock) == webhook_bytes(engine, out, notified["eventId"])  # signed, verified
        body = json.loads(raw)
        assert list(body)[-1] == "signature" and body["signature"].startswith(f"t={int(clock.now())},v1=")
        assert list(body)[:2] == ["event", "eventId"] and body["event"] == "approval"
        assert body["pendingId"] == out.pending[0].pending_id and body["eventId"].startswith("evt_")
        assert (body["tool"], body["args"], body["reason"]) == (
            "issue_refund",
            REFUND_ARGS,
            "refunds need a human",
        )
        assert (
            body["resolveUrl"] == f"https://loop.example.test/pending-approvals/{body['pendingId']}/resolve"
        )
        assert calls.log == []


def test_a_question_pushes_its_entry_too(tmp_path: Path, server: RedisServer) -> None:
    config = {"url": server.url()}  # the default key
    with deployed(tmp_path, config, {}, ["approval", "question"], QUESTION_SCRIPT) as (engine, _, clock):
        out = engine.send_message("shop", "my order arrived broken")
        assert out.stop_reason is StopReason.PENDING_QUESTION
        [raw] = reader(server).lrange("loopengine:approvals", 0, -1)
        [notified] = audit(engine, out.turn_id, "notified")
        assert body_of(raw, clock) == webhook_bytes(engine, out, notified["eventId"])
        body = json.loads(raw)
        assert (body["event"], body["question"], body["options"]) == ("question", *QUESTION.values())
        assert body["resolveUrl"].endswith(f"/pending-questions/{body['pendingId']}/answer")


def test_events_choose_what_is_pushed(tmp_path: Path, server: RedisServer) -> None:
    config = {"url": server.url(), "key": KEY}
    with deployed(tmp_path, config, {}, ["question", "run_finish"], REFUND_SCRIPT) as (engine, _, _):
        out = engine.send_message("shop", "refund A-1001")
        assert out.status is TurnStatus.PAUSED
        assert reader(server).llen(KEY) == 0  # an approval is not among the events; nor is run_start
        assert audit(engine, out.turn_id, "notified") == []
        engine.resolve(out.pending[0].pending_id, Approval(), _decider())
        [raw] = reader(server).lrange(KEY, 0, -1)
        finished = json.loads(raw)
        assert (finished["event"], finished["stopReason"], finished["text"]) == (
            "run_finish",
            "end_turn",
            "Refund issued.",
        )


def _decider() -> Any:
    from loopengine.app.request.resolution import Decider

    return Decider("user:ops")


# -- at least once: the outbox --------------------------------------------------------------------


def test_a_redis_that_is_down_gets_the_entry_from_the_outbox_when_it_is_back(
    tmp_path: Path, server: RedisServer
) -> None:
    config = {"url": server.url(), "key": KEY, "timeout": 1}
    with deployed(tmp_path, config, {}, ["approval"], REFUND_SCRIPT) as (engine, calls, clock):
        server.kill()
        started = time.monotonic()
        out = engine.send_message("shop", "refund A-1001")
        assert time.monotonic() - started < 3  # a dead Redis costs one quick failure, never a hang
        assert out.status is TurnStatus.PAUSED  # the pause itself is not lost
        [failed] = audit(engine, out.turn_id, "notification_failed")
        assert "push failed: ConnectionError" in failed["error"] and failed["attempts"] == 1

        server.start(same_port=True)  # back, empty
        assert reader(server).llen(KEY) == 0
        clock.advance(outbox.FIRST_RETRY_SECONDS)
        assert engine.sweep().notified == 1
        [raw] = reader(server).lrange(KEY, 0, -1)
        assert json.loads(raw)["eventId"] == failed["eventId"]
        assert body_of(raw, clock) == webhook_bytes(engine, out, failed["eventId"])
        clock.advance(outbox.MAX_BACKOFF_SECONDS)
        engine.sweep()
        assert reader(server).llen(KEY) == 1  # delivered: never pushed again
        assert calls.log == []


def test_a_lost_reply_makes_a_duplicate_entry_with_the_same_event_id(
    tmp_path: Path, server: RedisServer
) -> None:
    proxy = LostReplyProxy(server.port)  # RPUSH reaches Redis, its answer never comes back
    config = {"url": f"redis://127.0.0.1:{proxy.port}/0", "key": KEY, "timeout": 1}
    try:
        with deployed(tmp_path, config, {}, ["approval"], REFUND_SCRIPT) as (engine, _, clock):
            out = engine.send_message("shop", "refund A-1001")
            [failed] = audit(engine, out.turn_id, "notification_failed")
            assert proxy.cut == 1 and reader(server).llen(KEY) == 1  # it did arrive
            clock.advance(outbox.FIRST_RETRY_SECONDS)
            assert engine.sweep().notified == 1
            first, second = reader(server).lrange(KEY, 0, -1)
            # the same body, the same eventId (a receiver drops the copy), each signed when sent
            assert body_of(first, clock) == body_of(second, clock)
            assert json.loads(first)["eventId"] == failed["eventId"]
    finally:
        proxy.close()


def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel's backlog), never replies
    port = silent.getsockname()[1]
    try:
        notifier = RedisNotifier(f"redis://127.0.0.1:{port}/0", KEY, timeout=0.5, secret=SECRET)
        started = time.monotonic()
        with pytest.raises(DeliveryError, match="push failed: TimeoutError"):
            notifier.send(Notification("approval", {"eventId": "evt_1"}))
        assert time.monotonic() - started < 2.5
    finally:
        silent.close()


def test_a_key_of_another_type_is_a_delivery_error(server: RedisServer) -> None:
    reader(server).set(KEY, "not a list")
    notifier = RedisNotifier(server.url(), KEY, secret=SECRET)
    with pytest.raises(DeliveryError, match="WRONGTYPE") as caught:
        notifier.send(Notification("approval", {"eventId": "evt_1"}))
    assert isinstance(caught.value.__cause__, redis.ResponseError)
    with pytest.raises(DeliveryError, match="unknown notification event"):
        notifier.send(Notification("nope", {}))
    with pytest.raises(DeliveryError, match="not JSON-serialisable"):
        notifier.send(Notification("run_finish", {"text": float("nan")}))


# -- streams ----------------------------------------------------------------------------------------


def test_stream_mode_adds_the_body_with_event_fields_and_trims(server: RedisServer) -> None:
    stream = {"url": server.url(), "key": KEY, "mode": "stream", "maxlen": 5, "secret_env": "REDIS_SECRET"}
    clock = FakeClock()
    notifier = channels.build({"channel": "redis", "config": stream}, SIGNING, clock)
    assert notifier is not None
    note = Notification("approval", {"eventId": "evt_" + "a" * 32, "pendingId": "pnd_1", "tool": "t"})
    where = notifier.send(note)
    added = reader(server).xrange(KEY)
    assert added is not None
    [(entry_id, fields)] = added
    assert isinstance(entry_id, bytes) and fields is not None  # the reader does not decode responses
    assert where == f"redis stream {KEY} at 127.0.0.1:{server.port}/0 (entry {entry_id.decode()})"
    signature = fields.pop(b"signature")
    assert isinstance(signature, bytes) and signature.startswith(f"t={int(clock.now())},v1=".encode())
    assert fields == {
        b"event": b"approval",
        b"eventId": ("evt_" + "a" * 32).encode(),
        b"body": notification_body(note).encode(),
    }
    for n in range(300):
        notifier.send(Notification("run_start", {"eventId": f"evt_{n}"}))
    assert reader(server).xlen(KEY) < 200  # MAXLEN ~ 5 trims whole nodes (100 entries each)


# -- secrets, passwords, TLS ------------------------------------------------------------------------


def test_a_password_comes_from_url_env_and_never_shows(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", password=PASSWORD).start()
    try:
        env = {"SHOP_REDIS_URL": server.url(PASSWORD), "WRONG_URL": server.url("guess")}
        with pytest.raises(ConfigError, match="url_env") as inline:
            channels.build({"channel": "redis", "config": {"url": server.url(PASSWORD)}}, env, FakeClock())
        assert PASSWORD not in str(inline.value)

        with deployed(tmp_path, {"url_env": "SHOP_REDIS_URL"}, env, ["approval"], REFUND_SCRIPT) as (
            engine,
            _,
            _,
        ):
            out = engine.send_message("shop", "refund A-1001")
            [raw] = reader(server, PASSWORD).lrange(KEY, 0, -1)
            assert json.loads(raw)["pendingId"] == out.pending[0].pending_id
            notifier = engine.rt.notifier_for(engine.rt.agents.get("shop"))
            assert PASSWORD not in repr(notifier)

        wrong = RedisNotifier(env["WRONG_URL"], KEY, secret=SECRET)
        with pytest.raises(DeliveryError, match="AuthenticationError") as caught:
            wrong.send(Notification("approval", {"eventId": "evt_1"}))
        assert "guess" not in str(caught.value) and PASSWORD not in str(caught.value)
        assert reader(server, PASSWORD).llen(KEY) == 1
    finally:
        server.kill()


def test_a_user_allowed_only_rpush_and_xadd_on_its_keys_is_enough(tmp_path: Path) -> None:
    acl = ("--user", "default", "off", "--user", "notifier", "on", ">n0tifier-pw", "~loopengine:*")
    server = RedisServer(tmp_path / "redis", args=(*acl, "resetchannels", "-@all", "+rpush", "+xadd")).start()
    try:
        url = server.url("n0tifier-pw", user="notifier")
        note = Notification("approval", {"eventId": "evt_1"})
        assert RedisNotifier(url, "loopengine:list", secret=SECRET).send(note).startswith("redis list")
        assert (
            RedisNotifier(url, "loopengine:stream", mode="stream", secret=SECRET)
            .send(note)
            .startswith("redis stream")
        )
        with pytest.raises(DeliveryError, match="NoPermissionError"):
            RedisNotifier(url, "elsewhere", secret=SECRET).send(note)
    finally:
        server.kill()


def test_tls_verifies_the_server_certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tls = make_tls(tmp_path)
    server = RedisServer(tmp_path / "redis", tls=tls).start()
    try:
        note = Notification("approval", {"eventId": "evt_1"})
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "nothing-trusted.pem"))
        with pytest.raises(DeliveryError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            RedisNotifier(server.url(), KEY, timeout=3, secret=SECRET).send(note)
        monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))  # the bundle the system would hold
        assert RedisNotifier(server.url(), KEY, timeout=3, secret=SECRET).send(note).startswith("redis list")
        ssl_reader = redis.Redis(host="127.0.0.1", port=server.port, ssl=True, ssl_ca_certs=str(tls.ca))
        assert ssl_reader.llen(KEY) == 1
    finally:
        server.kill()


# -- configuration and cost ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        ({}, {}, "needs url .*LOOPENGINE_REDIS_URL is not set"),
        ({"url_env": "MINE"}, {}, "MINE is not set"),
        ({"url": "http://127.0.0.1:6379"}, {}, "must be redis://"),
        ({"url": "unix:///run/redis.sock"}, {}, "must be redis://"),
        ({"url": "redis://127.0.0.1:notaport"}, {}, "not a valid URL"),
        ({"url": "redis://127.0.0.1:6379/0?socket_timeout=600"}, {}, "no query parameters"),
        ({"url": "redis://127.0.0.1:6379/zero"}, {}, "database number"),
        ({"url": "redis://cache.internal:6379/0"}, {}, "plain redis:// only to a loopback host"),
        ({"url_env": "U"}, {"U": "redis://:pw@cache.internal/0"}, "plain redis:// only to a loopback host"),
        ({"url": "redis://:hunter2@127.0.0.1/0"}, {}, "holds a password"),
        ({"url": "redis://127.0.0.1", "password_env": "P"}, {}, "unknown config key 'password_env'"),
        ({"url": "redis://127.0.0.1", "mode": "pubsub"}, {}, "mode must be list or stream"),
        ({"url": "redis://127.0.0.1", "maxlen": 10}, {}, "for mode: stream"),
        ({"url": "redis://127.0.0.1", "mode": "stream", "maxlen": 0}, {}, "positive"),
        ({"url": "redis://127.0.0.1", "mode": "stream", "maxlen": 1.5}, {}, "whole number"),
        ({"url": "redis://127.0.0.1", "timeout": 60}, {}, "at most 10"),
        ({"url": "redis://127.0.0.1", "timeout": "2"}, {}, "must be a number"),
        ({"url": "redis://127.0.0.1", "key": ""}, {}, "key must be 1 to 512"),
        ({"url": "redis://127.0.0.1", "key": "a\nb"}, {}, "printable"),
        ({"url": "redis://127.0.0.1", "plaintext": "yes"}, {}, "plaintext is true or false"),
        ({"url": "redis://127.0.0.1"}, {}, "secret_env must name a set environment variable"),
        ({"url": "redis://127.0.0.1", "secret_env": "NOT_SET"}, {}, "secret_env must name a set"),
        ({"url": "redis://127.0.0.1", "secret": "hunter2"}, {}, "put secret in the environment"),
    ],
)
def test_bad_config_is_a_clear_config_error(
    config: dict[str, Any], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        channels.build({"channel": "redis", "config": config}, env, FakeClock())
    assert "hunter2" not in str(caught.value) and ":pw@" not in str(caught.value)


def test_plaintext_and_tls_urls_to_remote_hosts() -> None:
    remote = {"url_env": "U", "plaintext": True, "secret_env": "REDIS_SECRET"}
    built = channels.build(
        {"channel": "redis", "config": remote}, {"U": "redis://:pw@cache.internal/2", **SIGNING}, FakeClock()
    )
    assert isinstance(built, RedisNotifier) and built.server == "cache.internal:6379/2" and not built.tls
    tls = channels.build(
        {"channel": "redis", "config": {"secret_env": "REDIS_SECRET"}},
        {"LOOPENGINE_REDIS_URL": "rediss://:pw@cache.internal:6380", **SIGNING},
        FakeClock(),
    )
    assert isinstance(tls, RedisNotifier) and tls.tls and "pw" not in repr(tls)


def test_building_and_importing_the_channel_does_not_import_redis() -> None:
    script = """
import sys
from loopengine.domain.base.clock import FakeClock
from loopengine.channels import base as channels
from loopengine.channels.redis import consume, resolve, send
config = {"url": "redis://127.0.0.1:1/0", "secret_env": "S"}
notifier = channels.build({"channel": "redis", "config": config}, {"S": "k"}, FakeClock())
assert notifier is not None
assert "redis" not in sys.modules and "httpx" not in sys.modules, sorted(sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_one_client_per_server_per_process(server: RedisServer) -> None:
    a, b = (
        RedisNotifier(server.url(), "loopengine:a", secret=SECRET),
        RedisNotifier(server.url(), "loopengine:b", secret=SECRET),
    )
    note = Notification("approval", {"eventId": "evt_1"})
    a.send(note)
    b.send(note)
    assert client_for(server.url(), 2.0) is client_for(server.url(), 2.0)
    pool = client_for(server.url(), 2.0).connection_pool
    threads = [threading.Thread(target=a.send, args=(note,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reader(server).llen("loopengine:a") == 9
    assert len(pool._available_connections) + len(pool._in_use_connections) <= 8


def test_every_entry_is_signed_and_what_was_changed_or_signed_otherwise_fails(server: RedisServer) -> None:
    clock = FakeClock()
    notifier = RedisNotifier(server.url(), KEY, secret=SECRET, clock=clock)
    args = {"eventId": "evt_" + "b" * 32, "pendingId": "pnd_1", "tool": "t", "args": {"x": 1}}
    note = Notification("approval", args)
    notifier.send(note)
    [raw] = reader(server).lrange(KEY, 0, -1)
    assert isinstance(raw, bytes)  # the reader does not decode responses
    assert body_of(raw, clock) == notification_body(note).encode()
    unsigned = notification_body(note).encode()
    refused = [
        (raw.replace(b'"x":1', b'"x":9'), SECRET, RejectReason.BAD_SIGNATURE),  # one changed byte
        (raw, "another-secret", RejectReason.BAD_SIGNATURE),
        (unsigned, SECRET, RejectReason.MISSING_HEADER),
        (unsigned[:-1] + b',"signature":"t=1,v1=' + b"0" * 64 + b'"}', SECRET, RejectReason.BAD_SIGNATURE),
    ]
    for entry, secret, reason in refused:
        with pytest.raises(WebhookVerificationError) as caught:
            opened(secret, entry, tolerance=WEEK, now=clock.now())
        assert caught.value.reason is reason, entry
    with pytest.raises(WebhookVerificationError) as stale:  # a replay older than the window
        opened(SECRET, raw, tolerance=WEEK, now=clock.now() + WEEK + 1)
    assert stale.value.reason is RejectReason.STALE_TIMESTAMP
    assert SECRET not in repr(notifier)
