"""``loopengine dev`` refuses what a hostile web page or a slow client sends (issue 8).

A real server in a subprocess, in its default anonymous mode (the case the issue attacks: any page
the developer visits can reach 127.0.0.1): foreign Host headers (DNS rebinding) and non-JSON POSTs
(cross-site forms) are refused before the handler runs, so nothing starts; a body over the limit
is refused before it is read; a client that trickles its request is cut off at the read deadline;
and the server's own log never shows a magic-link token, a password or a query string.
"""

from __future__ import annotations

import base64
import json
import os
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.channels.magic.token import issue_token
from loopengine.http import web
from loopengine.local import dev, dev_guard
from tests.dev_support import DevProcess, free_port, request

READ_TIMEOUT = 1.0
MESSAGES = "/agents/customer-service/messages"
MESSAGE = {"message": "Order A-1001 arrived broken, please refund"}
MAGIC_SECRET = "dev-hardening-magic-secret"
PASSWORD = "pw-Zq8-never-in-logs"


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "LOOPENGINE_DB": str(tmp / "dev.db"), "LOOPENGINE_MODEL": "scripted", **extra}
    for name in ("LOOPENGINE_TABLE", "LOOPENGINE_DEFAULT_WEBHOOK_URL", "LOOPENGINE_ALLOW_ANONYMOUS"):
        env.pop(name, None)
    if "LOOPENGINE_ADMIN_AUTH" not in extra:
        env.pop("LOOPENGINE_ADMIN_AUTH", None)
        env.pop("LOOPENGINE_USERS", None)
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """Anonymous ``loopengine dev`` (no credentials configured), read timeout 1 s."""
    tmp = tmp_path_factory.mktemp("dev-hardening")
    args = ("--workers", "1", "--sweep-interval", "0", "--read-timeout", str(READ_TIMEOUT))
    srv = DevProcess(_env(tmp), free_port(), tmp / "dev.log", args)
    srv.start()
    yield srv
    srv.stop()


def exchange(port: int, data: bytes, host: str = "127.0.0.1") -> bytes:
    """Send ``data`` on a fresh connection; everything the server answers until it closes."""
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def parse(raw: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    """(status, lower-cased headers, JSON body) of one HTTP/1.1 answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body) if body else {}


def post(
    port: int, path: str, body: bytes, headers: dict[str, str], host: str | None = "127.0.0.1"
) -> tuple[int, dict[str, str], dict[str, Any]]:
    lines = [f"POST {path} HTTP/1.1", "Connection: close", f"Content-Length: {len(body)}"]
    if host is not None:
        lines.append(f"Host: {host}")
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return parse(exchange(port, ("\r\n".join(lines) + "\r\n\r\n").encode() + body))


def open_items(port: int) -> list[dict[str, Any]]:
    status, body = request(port, "GET", "/pending-approvals")
    assert status == 200, body
    items: list[dict[str, Any]] = body["items"]
    return items


JSON = {"Content-Type": "application/json"}


# -- Host (DNS rebinding) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8787",
        "127.0.0.1.evil.example",
        "localhost.evil.example",
        "localhost@evil.example",
        "127.0.0.2",
        "[::2]:8787",
        "[::1",
        "127.0.0.1:80x",
        "",
        None,  # no Host header at all
    ],
)
def test_a_foreign_host_is_421_and_starts_nothing(server: DevProcess, host: str | None) -> None:
    # GIVEN a page on a rebinding domain that posts a message to the developer's server
    before = open_items(server.port)
    status, headers, body = post(server.port, MESSAGES, json.dumps(MESSAGE).encode(), JSON, host)
    # THEN it is refused before any handler runs: no turn, no pending item
    assert (status, body["error"]) == (421, "misdirected_request"), body
    assert headers["connection"] == "close" and headers["x-content-type-options"] == "nosniff"
    assert open_items(server.port) == before


@pytest.mark.parametrize("host", ["127.0.0.1", "LOCALHOST", "localhost:1234", "[::1]:8787", "[::1]"])
def test_loopback_hosts_are_answered(server: DevProcess, host: str) -> None:
    raw = exchange(server.port, f"GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    assert parse(raw)[0] == 200


def test_the_host_it_listens_on_is_answered_too(tmp_path: Path) -> None:
    # GIVEN dev bound to another loopback address with --host
    port = free_port()
    args = ("--workers", "1", "--sweep-interval", "0")
    srv = DevProcess(_env(tmp_path), port, tmp_path / "dev.log", args, host="127.0.0.2")
    srv.start()  # its /health answered Host 127.0.0.2
    try:
        own = b"GET /health HTTP/1.1\r\nHost: 127.0.0.2:1\r\nConnection: close\r\n\r\n"
        assert parse(exchange(port, own, "127.0.0.2"))[0] == 200
        foreign = b"GET /health HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
        assert parse(exchange(port, foreign, "127.0.0.2"))[0] == 421
        assert "http://127.0.0.2:" in srv.log_text()
    finally:
        srv.kill()


# -- Content type (cross-site POST) -----------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ],
)
def test_a_post_that_is_not_json_is_415_and_starts_nothing(
    server: DevProcess, content_type: str | None
) -> None:
    before = open_items(server.port)
    headers = {} if content_type is None else {"Content-Type": content_type}
    status, _, body = post(server.port, MESSAGES, json.dumps(MESSAGE).encode(), headers)
    assert (status, body["error"]) == (415, "unsupported_media_type"), body
    assert open_items(server.port) == before


def test_cancel_without_a_body_still_needs_json(server: DevProcess) -> None:
    status, _, body = post(server.port, "/turns/trn_00000000000000000000000000000000/cancel", b"", {})
    assert status == 415, body


def test_json_with_a_charset_is_served(server: DevProcess) -> None:
    before = len(open_items(server.port))
    headers = {"Content-Type": "Application/JSON; charset=utf-8"}
    status, _, body = post(server.port, MESSAGES, json.dumps(MESSAGE).encode(), headers)
    assert status == 202 and body["status"] == "paused", body
    assert len(open_items(server.port)) == before + 1


def test_the_form_routes_take_form_posts(server: DevProcess) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    # reaches the Slack route, which refuses the unsigned request itself (not 415)
    status, _, body = post(server.port, "/integrations/slack/interactions", b"payload=%7B%7D", form)
    assert status == 401, body
    # reaches the magic-link route (disabled here: no secret), an HTML page, not a 415
    raw = exchange(
        server.port,
        b"POST /magic/abc HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 16\r\n\r\ndecision=approve",
    )
    assert raw.startswith(b"HTTP/1.1 404") and b"text/html" in raw


# -- Size, chunked uploads, slow clients ------------------------------------------------------


def test_the_dev_limit_is_the_apis_limit() -> None:
    assert dev.MAX_BODY_BYTES == web.MAX_BODY_BYTES


def test_an_oversized_body_is_413_before_a_byte_of_it_is_read(server: DevProcess) -> None:
    # GIVEN headers announcing 10 MiB and no body at all: a server that read first would wait
    # for it and answer 408 at the read deadline; this one answers 413 at once
    head = (
        f"POST {MESSAGES} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {10 * 1024 * 1024}\r\n\r\n"
    )
    status, headers, body = parse(exchange(server.port, head.encode()))
    assert (status, body["error"]) == (413, "too_large"), body
    assert headers["connection"] == "close"


def test_a_body_at_the_limit_is_read_and_handled(server: DevProcess) -> None:
    padding = "x" * (dev.MAX_BODY_BYTES - len(json.dumps({"message": "hi", "pad": ""})))
    data = json.dumps({"message": "hi", "pad": padding}).encode()
    assert len(data) == dev.MAX_BODY_BYTES
    status, _, body = post(server.port, "/agents/no-such-agent/messages", data, JSON)
    assert status == 404, body  # read in full and handled (the agent does not exist)


@pytest.mark.parametrize("length", ["-1", "12abc", "1, 2", "0x10"])
def test_a_malformed_content_length_is_400(server: DevProcess, length: str) -> None:
    head = f"POST {MESSAGES} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    status, _, body = parse(exchange(server.port, f"{head}Content-Length: {length}\r\n\r\n{{}}".encode()))
    assert (status, body["error"]) == (400, "bad_request"), body


def test_a_chunked_upload_is_411(server: DevProcess) -> None:
    before = open_items(server.port)
    chunk = json.dumps(MESSAGE).encode()
    raw = (
        (
            f"POST {MESSAGES} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        ).encode()
        + f"{len(chunk):x}\r\n".encode()
        + chunk
        + b"\r\n0\r\n\r\n"
    )
    status, _, body = parse(exchange(server.port, raw))
    assert (status, body["error"]) == (411, "length_required"), body
    assert open_items(server.port) == before


def _closed_while_trickling(port: int, first: bytes, drip: bytes, drops: int = 300) -> tuple[int, bytes]:
    """Send ``first``, then ``drip`` every 0.1 s; (drips sent, answer) once the server hangs up."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(first)
        answer = b""
        for sent in range(drops):
            readable, _, _ = select.select([sock], [], [], 0.1)
            if readable:
                while chunk := sock.recv(65536):
                    answer += chunk
                return sent, answer
            try:
                sock.sendall(drip)
            except OSError:  # reset: the server is gone
                return sent, answer
    return drops, answer


def test_a_trickled_body_is_cut_off_at_the_read_deadline(server: DevProcess) -> None:
    # GIVEN a client that sends its headers, then one byte of a 1000-byte body at a time:
    # every byte arrives well within a per-read timeout, so only a whole-request deadline ends it
    before = open_items(server.port)
    head = (
        f"POST {MESSAGES} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n"
    )
    sent, answer = _closed_while_trickling(server.port, head.encode(), b" ")
    assert sent < 300, "the server kept reading a trickled body"
    status, _, body = parse(answer)
    assert (status, body["error"]) == (408, "request_timeout"), body
    assert open_items(server.port) == before


def test_trickled_headers_are_cut_off(server: DevProcess) -> None:
    sent, answer = _closed_while_trickling(server.port, b"GET /health HTTP/1.1\r\nX-Slow: ", b"a")
    assert sent < 300 and answer == b"", answer


def test_headers_that_never_finish_are_dropped(server: DevProcess) -> None:
    # the server hangs up (recv returns b"" well before this client's own 30 s timeout)
    assert exchange(server.port, b"POST /agents/x/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n") == b""


def test_a_slow_client_does_not_block_others(server: DevProcess) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as slow:
        slow.sendall(b"GET /health HTTP/1.1\r\n")  # and nothing more
        assert request(server.port, "GET", "/health") == (200, {"status": "ok"})


# -- Logs -------------------------------------------------------------------------------------


def test_safe_path_hides_tokens_and_queries() -> None:
    assert dev_guard.safe_path("/magic/abc.def?x=1") == "/magic/<redacted>?<query redacted>"
    assert dev_guard.safe_path("//%6Dagic/abc") == "/magic/<redacted>"
    assert dev_guard.safe_path("/turns/trn_1") == "/turns/trn_1"
    assert dev_guard.safe_path("/x\r\nforged log line") == "<unprintable path>"


def test_the_dev_log_never_shows_a_token_a_password_or_a_query(tmp_path: Path) -> None:
    # GIVEN dev with Basic users and magic links, serving a paused refund's magic link
    users = [{"user": "ops", "password": PASSWORD, "tenants": ["acme"]}]
    env = _env(
        tmp_path,
        LOOPENGINE_ADMIN_AUTH=f"admin:{PASSWORD}",
        LOOPENGINE_USERS=json.dumps(users),
        LOOPENGINE_MAGIC_LINK_SECRET=MAGIC_SECRET,
    )
    srv = DevProcess(env, free_port(), tmp_path / "dev.log", ("--workers", "1", "--sweep-interval", "0"))
    srv.start()
    try:
        admin = "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
        ops = "Basic " + base64.b64encode(f"ops:{PASSWORD}".encode()).decode()
        status, paused = request(srv.port, "POST", MESSAGES, {**MESSAGE, "tenant": "acme"}, auth=ops)
        assert status == 202, paused
        pending_id = paused["pendingItems"][0]["pendingId"]
        token = issue_token(MAGIC_SECRET, pending_id, "reviewer@example.com", time.time() + 3600)
        query_secret = "qs-Secret-4471"
        assert (
            request(srv.port, "GET", f"/pending-approvals?tenant=acme&token={query_secret}", auth=ops)[0]
            == 200
        )
        assert (
            request(
                srv.port, "GET", "/pending-approvals", auth="Basic " + base64.b64encode(b"ops:wrong").decode()
            )[0]
            == 401
        )
        for method, body in (("GET", b""), ("POST", b"decision=deny&comment=no")):
            head = (
                f"{method} /magic/{token} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            assert exchange(srv.port, head.encode() + body).startswith(b"HTTP/1.1 200")
        # a malformed request line that carries the token (the server's error path)
        exchange(srv.port, f"GET /magic/{token} HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n".encode())
        assert request(srv.port, "GET", f"/turns/{paused['turnId']}", auth=admin)[1]["status"] == "finished"
    finally:
        srv.stop()
    log = srv.log_text()
    # THEN the requests were logged, and none of the secrets they carried
    assert "/magic/<redacted>" in log and "/pending-approvals?<query redacted>" in log, log
    for secret in (token, token[:20], PASSWORD, query_secret, admin.split()[1], ops.split()[1], MAGIC_SECRET):
        assert secret not in log, secret
