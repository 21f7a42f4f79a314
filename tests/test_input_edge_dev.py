"""Input hygiene and connection bursts through ``loopengine dev`` (a real server in a subprocess).

``dev`` used to decode bodies with ``errors="replace"``, so invalid UTF-8 reached the handler as
U+FFFD and was accepted; now it travels base64-encoded, as API Gateway sends binary, and is refused.
Its listen backlog was socketserver's 5, so a burst of connects was reset (issue 7 item 12).
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from loopengine.local.dev import LISTEN_BACKLOG, to_event
from tests.dev_support import AUTH, DevProcess, admin_env, free_port, request

BURST = 100


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    tmp = tmp_path_factory.mktemp("edge-dev")
    srv = DevProcess(admin_env(tmp / "dev.db"), free_port(), tmp / "dev.log")
    srv.start()
    yield srv
    srv.stop()


def raw_request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, Any]]:
    """One request with exactly these body bytes (urllib would not send invalid UTF-8 as is)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Authorization": AUTH, "Content-Type": "application/json"}
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


# -- to_event: nothing is silently repaired ------------------------------------------------------


def test_invalid_utf8_text_bodies_travel_base64_encoded() -> None:
    bad = b'{"message": "refund \xff"}'
    event = to_event("POST", "/agents/a/messages", {"Content-Type": "application/json"}, bad, "127.0.0.1")
    assert event["isBase64Encoded"] is True and base64.b64decode(event["body"]) == bad
    good = '{"message": "café"}'.encode()
    event = to_event("POST", "/agents/a/messages", {"Content-Type": "application/json"}, good, "127.0.0.1")
    assert event["isBase64Encoded"] is False and event["body"] == '{"message": "café"}'


def test_invalid_utf8_in_the_query_arrives_as_surrogates_not_replacement_characters() -> None:
    event = to_event("GET", "/pending-approvals?tenant=a%FFb&agent=ok", {}, b"", "127.0.0.1")
    assert event["queryStringParameters"] == {"tenant": "a\udcffb", "agent": "ok"}


# -- through the server --------------------------------------------------------------------------

MSG = b'{"message": "Order A-1001 arrived broken"'
BAD_BODIES = {
    "invalid UTF-8 in the message": b'{"message": "Order A-1001 arrived broken \xff"}',
    "encoded surrogate bytes in sessionId": MSG + b', "sessionId": "s\xed\xa0\x80"}',
    "escaped lone surrogate in tenant": MSG + b', "tenant": "acme\\ud800"}',
    "escaped lone surrogate in sessionId": MSG + b', "sessionId": "\\udfff"}',
    "100k-deep arrays": b"[" * 100_000 + b"]" * 100_000,
    "100k-deep inside a message": MSG + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "NaN": MSG + b', "x": NaN}',
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_bad_message_bodies_are_400_through_dev_and_start_nothing(server: DevProcess, case: str) -> None:
    before = request(server.port, "GET", "/pending-approvals")
    status, body = raw_request(server.port, "POST", "/agents/customer-service/messages", BAD_BODIES[case])
    assert (status, body["error"]) == (400, "invalid_input"), body
    assert request(server.port, "GET", "/pending-approvals") == before


@pytest.mark.parametrize("query", ["tenant=%ED%A0%80", "tenant=a%FFb", "agent=%C0%AF"])
def test_bad_query_strings_are_400_through_dev(server: DevProcess, query: str) -> None:
    status, body = raw_request(server.port, "GET", f"/pending-approvals?{query}")
    assert (status, body["error"]) == (400, "invalid_input"), body


def test_a_good_message_still_pauses_through_dev(server: DevProcess) -> None:
    status, body = request(
        server.port,
        "POST",
        "/agents/customer-service/messages",
        {"message": "Order A-1001 arrived broken — café ☕", "sessionId": "cust-dev-1", "tenant": "acme"},
    )
    assert status == 202 and body["sessionId"] == "cust-dev-1", body
    status, listed = request(server.port, "GET", "/pending-approvals?tenant=acme")
    assert status == 200 and len(listed["items"]) == 1


# -- a burst of simultaneous connections ----------------------------------------------------------


def test_a_burst_of_simultaneous_connections_is_answered_on_every_one(server: DevProcess) -> None:
    # GIVEN BURST clients released together, each connecting and sending one request
    start = threading.Barrier(BURST)
    answers: list[str] = []
    lock = threading.Lock()

    def client() -> None:
        start.wait()
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                got = sock.makefile("rb").readline().decode().strip()
        except OSError as exc:  # reset, refused, or never served
            got = f"{type(exc).__name__}: {exc}"
        with lock:
            answers.append(got)

    threads = [threading.Thread(target=client) for _ in range(BURST)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # THEN every connection got an HTTP answer: none reset, none left unserved
    failed = [a for a in answers if a != "HTTP/1.1 200 OK"]
    assert len(answers) == BURST and failed == [], failed[:5]
    assert LISTEN_BACKLOG >= BURST
