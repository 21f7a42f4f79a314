"""``loopengine dev`` on DynamoDB: the dev server as a subprocess against a local moto server.

The subprocess finds the table the way a user's shell would tell it: ``LOOPENGINE_TABLE`` names it
and botocore's ``AWS_ENDPOINT_URL_DYNAMODB`` points the client at the moto server (fake credentials,
so nothing can reach real AWS). A parked turn lives in the table, so it survives a restart.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loopengine.domain.messages import Message, check_protocol
from loopengine.stores.dynamodb import create_table
from tests.dev_support import DevProcess, free_port, request

pytestmark = pytest.mark.slow  # real processes, seconds per test: make test runs these first

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class MotoServer:
    """A moto server on a free local port with a fresh loopengine table on it."""

    endpoint: str
    table: str
    client: Any

    def items(self, sort_key: str) -> list[dict[str, Any]]:
        """Raw items whose sort key is ``sort_key``."""
        pages = self.client.get_paginator("scan").paginate(TableName=self.table)
        return [i for page in pages for i in page["Items"] if i["sk"]["S"] == sort_key]


@pytest.fixture
def moto_server() -> Iterator[MotoServer]:
    """GIVEN moto's ``ThreadedMotoServer`` on a free local port, with a fresh loopengine table."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client(
            "dynamodb",
            endpoint_url=endpoint,
            region_name=FAKE_CREDENTIALS["AWS_DEFAULT_REGION"],
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
        )
        table = f"loopengine-dev-{uuid.uuid4().hex[:8]}"
        create_table(client, table)
        try:
            yield MotoServer(endpoint, table, client)
        finally:
            client.delete_table(TableName=table)
            client.close()
    finally:
        server.stop()


@pytest.fixture
def dev(moto_server: MotoServer, tmp_path: Path) -> Iterator[DevProcess]:
    """GIVEN ``loopengine dev`` on the moto table (output kept in ``dev.out``)."""
    aws_free = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env = {
        **aws_free,
        **FAKE_CREDENTIALS,
        "AWS_ENDPOINT_URL_DYNAMODB": moto_server.endpoint,
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "LOOPENGINE_TABLE": moto_server.table,
        "LOOPENGINE_DB": str(tmp_path / "must-not-be-created.db"),
        "LOOPENGINE_ADMIN_AUTH": "admin:secret",
        "LOOPENGINE_MODEL": "scripted",
    }
    for name in ("LOOPENGINE_DEFAULT_WEBHOOK_URL", "LOOPENGINE_RESUME_FUNCTION", "ANTHROPIC_API_KEY"):
        env.pop(name, None)
    srv = DevProcess(env, free_port(), tmp_path / "dev.out")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_dev_server_on_dynamodb_survives_a_restart(
    dev: DevProcess, moto_server: MotoServer, tmp_path: Path
) -> None:
    # GIVEN loopengine dev on the moto table; a message pauses on the refund
    status, paused = request(
        dev.port, "POST", "/agents/customer-service/messages", {"message": "Order A-1001 arrived broken."}
    )
    assert status == 202 and paused["stopReason"] == "pending_approval", paused
    turn_id = paused["turnId"]
    [refund] = paused["pendingItems"]
    assert refund["tool"] == "issue_refund"
    assert [i["pk"]["S"] for i in moto_server.items("TURN")] == [f"TURN#{turn_id}"]

    # WHEN it is approved with ?wait: the resume runs in the background and pauses again (chained)
    status, body = request(
        dev.port, "POST", f"/pending-approvals/{refund['pendingId']}/resolve?wait=10", {"decision": "approve"}
    )
    assert status == 202 and body["status"] == "paused" and body["turnId"] == turn_id, body
    [email] = body["pendingItems"]
    assert email["tool"] == "send_email" and email["args"]["intent"] == "refund"

    # AND the server is stopped and started again (nothing of the turn lives in the process)
    dev.stop()
    dev.start()

    # WHEN the email is approved with ?wait
    status, body = request(
        dev.port, "POST", f"/pending-approvals/{email['pendingId']}/resolve?wait=10", {"decision": "approve"}
    )

    # THEN the turn finished with the final text
    assert status == 200, body
    assert (body["status"], body["stopReason"], body["turnId"]) == ("finished", "end_turn", turn_id)
    assert body["text"].startswith("Done: order A-1001 was refunded")
    status, turn = request(dev.port, "GET", f"/turns/{turn_id}")
    assert (turn["status"], turn["stopReason"]) == ("finished", "end_turn")
    assert [e["type"] for e in turn["audit"]].count("resumed") == 2
    status, session = request(dev.port, "GET", f"/sessions/{paused['sessionId']}")
    assert status == 200
    history = [Message.from_dict(m) for m in session["messages"]]
    check_protocol(history)
    assert [u.name for m in history for u in m.tool_uses] == ["lookup_order", "issue_refund", "send_email"]
    late = request(
        dev.port, "POST", f"/pending-approvals/{refund['pendingId']}/resolve", {"decision": "deny"}
    )
    assert late == (200, {"alreadyResolved": True})
    status, listed = request(dev.port, "GET", "/pending-approvals")
    assert (status, listed) == (200, {"items": []})

    # AND everything went to DynamoDB: the SQLite file was never created
    assert f"DynamoDB table {moto_server.table}" in dev.log_text()
    assert not (tmp_path / "must-not-be-created.db").exists()
