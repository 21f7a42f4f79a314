"""The live channel end to end against a real ``loopengine dev``: Server-Sent Events, ``loopengine chat``.

The chat runs on a real pseudo-terminal (tests/pty_support.py): typed lines, Ctrl-C as the
terminal sends it. GIVEN the bundled customer-service agent (offline scripted model), WHEN a
person approves the refund inline and walks away from the confirmation email, THEN the email waits
in ``GET /pending-approvals`` and an ordinary HTTP resolve finishes the turn; the inline decision
is recorded with the label ``live`` the chat declares (``declaredChannel``) beside the server's channel.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dev_support import AUTH, DevProcess, admin_env, free_port, request
from tests.pty_support import Terminal

pytestmark = pytest.mark.slow  # real processes, seconds per test: make test runs these first

MESSAGE = "Order A-1001 arrived broken."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    env = admin_env(tmp_path_factory.mktemp("live") / "dev.db")
    srv = DevProcess(env, free_port(), args=("--workers", "3", "--sweep-interval", "0"))
    srv.start()
    yield srv
    srv.stop()


class Stream:
    """One ``Accept: text/event-stream`` request; :meth:`next` parses the next frame."""

    def __init__(self, port: int, path: str, **headers: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        self.conn.request("GET", path, headers={"Accept": "text/event-stream", **headers})
        self.resp = self.conn.getresponse()

    def next(self) -> dict[str, Any] | None:
        """The next event frame as ``{"event", "data", "id"}``; None when the stream ended."""
        frame: dict[str, Any] = {}
        while True:
            line = self.resp.fp.readline()
            if not line:
                return None
            text = line.decode().rstrip("\n")
            if not text:
                if frame:
                    return frame
                continue
            if text.startswith(":"):
                continue
            key, _, value = text.partition(": ")
            frame[key] = json.loads(value) if key == "data" else value

    def until(self, kind: str) -> list[dict[str, Any]]:
        """Frames up to and including the first of type ``kind``."""
        seen: list[dict[str, Any]] = []
        while True:
            frame = self.next()
            assert frame is not None, f"the stream ended before {kind}: {seen}"
            seen.append(frame)
            if frame["event"] == kind:
                return seen

    def close(self) -> None:
        self.conn.close()


def _pause(port: int) -> dict[str, Any]:
    status, body = request(port, "POST", "/agents/customer-service/messages", {"message": MESSAGE})
    assert status == 202, body
    return body


def test_events_stream_as_server_sent_events_until_the_turn_finishes(server: DevProcess) -> None:
    paused = _pause(server.port)
    turn = paused["turnId"]
    stream = Stream(server.port, f"/turns/{turn}/events", Authorization=AUTH)
    try:
        assert stream.resp.status == 200
        assert stream.resp.getheader("content-type", "").startswith("text/event-stream")
        frames = stream.until("approval:pending")
        assert frames[0]["event"] == "started" and frames[-1]["data"]["tool"] == "issue_refund"
        first = frames[-1]["data"]["pendingId"]
        assert (
            request(server.port, "POST", f"/pending-approvals/{first}/resolve", {"decision": "approve"})[0]
            == 202
        )
        frames += stream.until("approval:pending")  # the chained pause arrives on the same stream
        email = frames[-1]["data"]
        assert email["tool"] == "send_email"
        denied = {"decision": "deny", "comment": "not yet"}
        assert (
            request(server.port, "POST", f"/pending-approvals/{email['pendingId']}/resolve", denied)[0] == 200
        )
        frames += stream.until("finished")
        assert frames[-1]["data"]["stopReason"] == "denied"
        while (frame := stream.next()) is not None:  # whatever follows the finish, then the end
            frames.append(frame)
    finally:
        stream.close()
    ids = [int(f["id"]) for f in frames]
    assert ids == list(range(1, len(ids) + 1))
    assert all(f["data"]["seq"] == int(f["id"]) and f["data"]["type"] == f["event"] for f in frames)
    assert "decided" in [f["event"] for f in frames]
    # a client reconnecting with Last-Event-ID continues after that event
    again = Stream(
        server.port, f"/turns/{turn}/events", Authorization=AUTH, **{"Last-Event-ID": str(ids[-2])}
    )
    try:
        assert [int(f["id"]) for f in iter(again.next, None)] == [ids[-1]]
    finally:
        again.close()


def test_event_stream_errors_are_the_routes_json(server: DevProcess) -> None:
    turn = _pause(server.port)["turnId"]
    for headers, path, status in [
        ({}, f"/turns/{turn}/events", 401),
        ({"Authorization": AUTH}, "/turns/trn_nope/events", 404),
        ({"Authorization": AUTH}, f"/turns/{turn}/events?after=x", 400),
    ]:
        stream = Stream(server.port, path, **headers)
        try:
            assert stream.resp.status == status
            assert "error" in json.loads(stream.resp.read())
        finally:
            stream.close()


def test_a_client_going_away_mid_stream_leaves_the_server_serving(server: DevProcess) -> None:
    turn = _pause(server.port)["turnId"]
    for _ in range(4):  # more streams abandoned than there are environments
        stream = Stream(server.port, f"/turns/{turn}/events", Authorization=AUTH)
        assert stream.next() is not None
        stream.close()
    status, body = request(server.port, "GET", f"/turns/{turn}/events?wait=0")
    assert status == 200 and body["events"]


def _chat(server: DevProcess, *extra: str, sigint_ignored: bool = False) -> Terminal:
    env = {**os.environ, "LOOPENGINE_CHAT_AUTH": "admin:secret"}
    url = f"http://127.0.0.1:{server.port}"
    argv = [sys.executable, "-m", "loopengine.local.cli", "chat", "customer-service", "--url", url, *extra]
    return Terminal(argv, env, sigint_ignored=sigint_ignored)


def test_ctrl_c_leaves_the_chat_even_when_it_was_started_with_sigint_ignored(server: DevProcess) -> None:
    """A script's background job (``cmd &``), nohup and some CI runners start it with SIGINT ignored."""
    term = _chat(server, sigint_ignored=True)
    try:
        term.expect("you> ")
        term.ctrl_c()
        term.expect("bye", timeout=10)  # the prompt waits with no time limit: only the signal ends it
        assert term.wait() == 0
    finally:
        term.close()


def test_chat_approves_inline_then_walks_away_and_the_item_waits_for_http(server: DevProcess) -> None:
    term = _chat(server)
    try:
        term.expect("you> ")
        term.line(MESSAGE)
        term.expect(r"\[tool\] lookup_order: ok")
        term.expect(r"issue_refund needs approval: .*212\.0")
        term.expect(r"\[e\]dit arguments > ")
        term.line("e")
        term.expect(r"new arguments as JSON")
        term.line('{"order_id": "A-1001"}')  # the server checks the tool's schema: asked again
        term.expect(r"rejected: .*'amount' is a required property")
        term.line('{"order_id": "A-1001", "amount": 100, "reason": "arrived broken"}')
        term.expect("recorded")
        term.expect(r"\[tool\] issue_refund: ok")
        term.expect(r"send_email needs approval: .*100\.00 USD")
        term.expect(r"\[e\]dit arguments > ")
        term.ctrl_c()  # walk away
        left = term.expect(r"Left 1 item\(s\) of turn (trn_\w+) pending")
        hint = term.expect(r"send_email: curl .*/pending-approvals/(pnd_\w+)/resolve")
        assert term.wait() == 0
    finally:
        term.close()
    assert "Traceback" not in term.output
    turn_id, pending_id = left.group(1), hint.group(1)
    status, listed = request(server.port, "GET", "/pending-approvals")
    [item] = [i for i in listed["items"] if i["turnId"] == turn_id]
    assert item["pendingId"] == pending_id and item["tool"] == "send_email"
    status, body = request(
        server.port, "POST", f"/pending-approvals/{pending_id}/resolve?wait=10", {"decision": "approve"}
    )
    assert status == 200 and body["stopReason"] == "end_turn" and "100.00 USD" in body["text"]
    _, turn = request(server.port, "GET", f"/turns/{turn_id}")
    decided = [e for e in turn["audit"] if e["type"] == "decided"]
    labels = [(d["channel"], d.get("declaredChannel"), d["edited"]) for d in decided]
    assert labels == [("api", "live", True), ("api", None, False)]


def test_chat_answers_a_question_denies_with_a_comment_and_leaves_on_ctrl_d(server: DevProcess) -> None:
    term = _chat(server)
    try:
        term.expect("you> ")
        term.line("hello, something went wrong")
        term.expect(r"the agent asks: Which order is this about\?")
        term.line("A-1001")
        term.expect(r"issue_refund needs approval")
        term.expect(r"\[e\]dit arguments > ")
        term.line("d")
        term.expect(r"comment \(optional\)> ")
        term.line("ask finance first")
        term.expect(r"\(turn finished: denied\)")
        term.expect("you> ")
        os.write(term.fd, b"\x04")  # Ctrl-D
        term.expect("bye")
        assert term.wait() == 0
    finally:
        term.close()
    assert "Traceback" not in term.output


def test_chat_says_so_when_the_server_is_not_there() -> None:
    env = {**os.environ, "LOOPENGINE_CHAT_AUTH": ""}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    term = Terminal(
        [sys.executable, "-m", "loopengine.local.cli", "chat", "x", "--url", url, "--wait-server", "1"], env
    )
    try:
        term.expect(r"waiting for loopengine dev at http://127\.0\.0\.1:\d+")
        term.expect(r"cannot reach http://127\.0\.0\.1:\d+.*is `loopengine dev` running")
        assert term.wait() == 2
    finally:
        term.close()
    assert "Traceback" not in term.output and term.output.count("waiting for") == 1


def test_chat_waits_for_a_server_that_is_still_starting(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "LOOPENGINE_CHAT_AUTH": "admin:secret"}
    url = f"http://127.0.0.1:{port}"
    term = Terminal(
        [sys.executable, "-m", "loopengine.local.cli", "chat", "customer-service", "--url", url], env
    )
    srv = DevProcess(admin_env(tmp_path / "late.db"), port, args=("--workers", "1", "--sweep-interval", "0"))
    try:
        term.expect(r"waiting for loopengine dev at http://127\.0\.0\.1:\d+ \(up to 30 s\)")
        srv.start()  # only now: the chat was waiting all along
        assert srv.port == port, "the port was taken meanwhile; the chat waits on the old one"
        term.expect("you> ")
        os.write(term.fd, b"\x04")
        term.expect("bye")
        assert term.wait() == 0
    finally:
        term.close()
        srv.stop()
    assert "Traceback" not in term.output and term.output.count("waiting for") == 1


def test_chat_refuses_bad_arguments(tmp_path: Path) -> None:
    term = Terminal(
        [sys.executable, "-m", "loopengine.local.cli", "chat", "x", "--live-wait", "-1"], dict(os.environ)
    )
    try:
        term.expect("--live-wait must be a positive number")
        assert term.wait() == 2
    finally:
        term.close()
