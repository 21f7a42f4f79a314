"""The clients of the HTTP API against a real ``loopengine dev``: the JavaScript module under node, and
:class:`loopengine.client.Client` for Python callers.

One server for the module (a subprocess on 127.0.0.1, the offline scripted model, ``admin:secret`` and
a user ``alice`` of tenant ``acme``). ``tests/js/loopengine-client.test.mjs`` runs under node's own
test runner (``node --test``, no npm package): it fetches ``GET /chat/static/loopengine-client.js`` from
the server and imports it as served. Needs Debian's ``nodejs`` (skipped without it, saying why;
``scripts/ensure_node.sh`` installs it, ``.ci/run`` does).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loopengine.client import ApiError, Client, Event, Unreachable
from loopengine.domain.messages import TextBlock
from tests.dev_support import DevProcess, admin_env, free_port

ROOT = Path(__file__).resolve().parent.parent
NODE_TESTS = ROOT / "tests" / "js" / "loopengine-client.test.mjs"
NODE = shutil.which("node") or shutil.which("nodejs")
USERS = [{"user": "alice", "password": "pw", "tenants": ["acme"]}]
REFUND = "Order A-1001 arrived broken, please refund it."
NO_NODE = (
    "node is missing: the client module's tests need Debian's nodejs; as root on Debian, "
    "LOOPENGINE_INSTALL_NODE=1 make test installs it (scripts/ensure_node.sh; .ci/run does this)"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    tmp = tmp_path_factory.mktemp("clients")
    env = admin_env(tmp / "dev.db", LOOPENGINE_USERS=json.dumps(USERS))
    srv = DevProcess(env, free_port(), log=tmp / "dev.log", args=("--sweep-interval", "0"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server: DevProcess) -> Iterator[Client]:
    with Client(f"http://127.0.0.1:{server.port}", "admin:secret", channel="live") as c:
        yield c


@pytest.mark.skipif(NODE is None, reason=NO_NODE)
def test_the_javascript_client_under_node(server: DevProcess) -> None:
    assert NODE is not None
    env = {
        **os.environ,
        "LOOPENGINE_URL": f"http://127.0.0.1:{server.port}",
        "LOOPENGINE_AUTH": "admin:secret",
        "LOOPENGINE_OTHER_AUTH": "alice:pw",
        "NODE_NO_WARNINGS": "1",
    }
    done = subprocess.run(
        [NODE, "--test", "--test-reporter=spec", str(NODE_TESTS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# fail 0" in done.stdout or "fail 0" in done.stdout, done.stdout
    assert "pass 4" in done.stdout, done.stdout


class Dropping(httpx.BaseTransport):
    """HTTP over a connection that drops the first ``drops`` event streams after their first frame."""

    def __init__(self, drops: int) -> None:
        self.inner, self.drops, self.types = httpx.HTTPTransport(), drops, list[str]()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        kind = response.headers.get("content-type", "")
        if "/events" in request.url.path:
            self.types.append(kind)
        if self.drops <= 0 or not kind.startswith("text/event-stream"):
            return response
        self.drops -= 1
        first = b""
        for chunk in response.stream:  # type: ignore[union-attr]
            first += chunk
            if b"\n\n" in first:
                break
        response.close()
        return httpx.Response(200, headers={"content-type": kind}, content=first[: first.index(b"\n\n") + 2])

    def close(self) -> None:
        self.inner.close()


def _until(client: Client, turn_id: str, after: int, kind: str, seen: list[Event], **kw: object) -> Event:
    for event in client.follow(turn_id, after, **kw):  # type: ignore[arg-type]
        seen.append(event)
        if event.type == kind:
            return event
    raise AssertionError(f"the turn finished without {kind}: {[e.type for e in seen]}")


def test_the_python_client_carries_the_seed_scenario(server: DevProcess) -> None:
    wire = Dropping(1)  # the first event stream drops after its first event: followed on from there
    with Client(f"http://127.0.0.1:{server.port}", "admin:secret", channel="live", transport=wire) as client:
        _seed_scenario(client)
    kinds = [t.split(";")[0] for t in wire.types]
    assert kinds[:2] == ["text/event-stream", "application/json"] and kinds[-1] == "text/event-stream", kinds


def _seed_scenario(client: Client) -> None:
    turn = client.send_message("customer-service", REFUND, live=True)
    assert turn.status == "running" and turn.session_id.startswith("ses_")
    seen: list[Event] = []
    refund = _until(client, turn.turn_id, 0, "approval:pending", seen)
    assert refund["tool"] == "issue_refund" and refund.get("args")["amount"] == 212.0
    # an edit the schema refuses: 400, and the item stays open
    with pytest.raises(ApiError) as refused:
        client.approve(refund["pendingId"], edited_args={"order_id": "A-1001"})
    assert refused.value.status == 400 and "'amount' is a required property" in str(refused.value)
    first = client.approve(refund["pendingId"], edited_args={**refund["args"], "amount": 100}, comment="half")
    assert (first.outstanding, first.status) == (0, "resuming")
    email = _until(client, turn.turn_id, refund.seq, "approval:pending", seen, stream=False, wait=5)
    assert "100.00 USD" in email["args"]["body"]
    last = client.approve(email["pendingId"], args_hash=email["argsHash"], wait=10)
    assert last.turn is not None and last.turn.status == "finished"
    assert last.turn.text is not None and last.turn.text.startswith("Done: order A-1001 was refunded")
    finished = _until(client, turn.turn_id, email.seq, "finished", seen)
    assert finished["text"] == last.turn.text
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))  # each follow resumed where one stopped
    assert client.approve(refund["pendingId"]).already_resolved  # a late click
    session = client.get_session(turn.session_id)
    assert session.messages[0].content == (TextBlock(REFUND),)
    decided = [e for e in client.get_turn(turn.turn_id)["audit"] if e["type"] == "decided"]
    assert [(d["decidedBy"], d.get("declaredChannel"), d["edited"]) for d in decided] == [
        ("user:admin", "live", True),
        ("user:admin", "live", False),
    ]


def test_the_python_client_answers_stops_and_is_refused_what_is_not_its_own(
    client: Client, server: DevProcess
) -> None:
    turn = client.send_message("customer-service", "hello, something went wrong")
    seen: list[Event] = []
    question = _until(client, turn.turn_id, 0, "question:pending", seen)
    assert question["question"] == "Which order is this about?"
    client.answer(question["pendingId"], "A-1001")
    _until(client, turn.turn_id, question.seq, "approval:pending", seen)
    stopped = client.cancel(turn.turn_id)
    assert stopped.cancelled and "already ran keep their effects" in stopped.note
    assert _until(client, turn.turn_id, 0, "finished", []).get("stopReason") == "cancelled"
    with Client(f"http://127.0.0.1:{server.port}", ("alice", "pw")) as alice:
        for call in (lambda: alice.get_session(turn.session_id), lambda: alice.cancel(turn.turn_id)):
            with pytest.raises(ApiError) as missing:
                call()
            assert (missing.value.status, missing.value.code) == (404, "not_found")
    with pytest.raises(Unreachable), Client(f"http://127.0.0.1:{free_port()}", timeout=2) as nobody:
        nobody.health()
