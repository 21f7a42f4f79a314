"""Stored forms: every record reads back equal, and writes exactly the bytes it always wrote.

The expected texts were written by the hand-made ``to_dict``s that :mod:`loopengine.domain.base.stored`
replaced: SQLite and DynamoDB keep these texts (and DynamoDB bills and compresses their bytes), so a
changed key order, a key no longer left out, or an older record that no longer parses shows here.
"""

from __future__ import annotations

import json

import pytest

from loopengine.authoring.mcp import McpPin
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.base.stored import StoredForm
from loopengine.domain.checkpoint import PendingItem, TurnCheckpoint
from loopengine.domain.decisions import Approve, Skipped
from loopengine.domain.idempotency import IdempotencyRecord
from loopengine.domain.messages import ToolResultBlock
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.tokens.context_window import Compaction
from loopengine.domain.tokens.metering import Metered
from loopengine.domain.tokens.usage import Usage
from loopengine.domain.turns import CallRecord, StopReason, TurnRecord, TurnStatus

BARE = PendingItem("pnd_1", "toolu_1", "issue_refund", {"amount": 5}, "ask", "approval", "h1")
ASKED = PendingItem("pnd_2", "toolu_2", "system_ask_user", {}, "", "question", "", ("a@x",), 12.5, "deny")
RECORDS: dict[str, StoredForm] = {
    "bare item": BARE,
    "item with expiry and approvers": ASKED,
    "open checkpoint": TurnCheckpoint("cp_1", "trn_1", "ses_1", "a", "", (), {"pnd_1": BARE}, 100.0),
    "closed checkpoint": TurnCheckpoint(
        "cp_1",
        "trn_1",
        "ses_1",
        "a",
        "acme",
        (ToolResultBlock("toolu_0", '{"ok":1}'),),
        {"pnd_2": ASKED},
        100.5,
        approved={"pnd_1": BARE},
        closed=True,
        denied=True,
        version=3,
        answer_at=4,
        order=("toolu_1", "toolu_2"),
        decisions=(
            Approve(pending_id="pnd_1", tool="t", at=1.0, decided_by="x"),
            Skipped(pending_id="pnd_2", tool="t", at=2.0),
        ),
    ),
    "new turn": TurnRecord("trn_1", "ses_1", "a", "acme", "cfg", 0, 10.0),
    "turn with every field": TurnRecord(
        "trn_1",
        "ses_1",
        "a",
        "",
        "cfg",
        5,
        10.0,
        trigger="schedule",
        status=TurnStatus.PAUSED,
        stop_reason=StopReason.DENIED,
        text="",
        checkpoint_id="cp_1",
        verdicts={"toolu_1": {"decision": "ask"}},
        lease_until=3.0,
        code_version="v1",
        updated_at=4.0,
        stop_requested=StopReason.CANCELLED,
        sticky_tools=("a", "b"),
        queued_message="hi",
        queued_behind=True,
        scoped_session=True,
        runner="r",
        due_at=9.0,
        model_failures=2,
        live=True,
        metered=Metered(Usage(1, 2, 3, 4), 5),
        counted=Metered(Usage(1, 0, 0, 0), 1),
        version=7,
    ),
    "started call": CallRecord("trn_1", "toolu_1", "lookup", 1.0),
    "finished call": CallRecord("trn_1", "toolu_1", "lookup", 1.0, "ok", {"type": "tool_result"}, 2.0),
    "pending notification": OutboxRecord("evt_1", "trn_1", "a", "cfg", "approval", {"eventId": "evt_1"}, 1.0),
    "notification given up": OutboxRecord(
        "evt_1",
        "trn_1",
        "a",
        "cfg",
        "approval",
        {"eventId": "evt_1"},
        1.0,
        10,
        "failed",
        None,
        "boom",
        True,
        "t1",
    ),
    "idempotency key": IdempotencyRecord("idk_1", "sha256:x", "trn_1", 1.0, 2.0),
    "trim": Compaction(3),
    "summary": Compaction(4, "the story so far"),
    "mcp pin": McpPin("shop", "refund", "sha256:y"),
}
OLDER: dict[str, tuple[type[StoredForm], JsonDict]] = {
    "item before kinds and hashes": (
        PendingItem,
        {"pendingId": "p", "toolUseId": "u", "tool": "t", "args": {}, "reason": "r"},
    ),
    "turn before tenants, usage as JSON": (
        TurnRecord,
        {
            "turnId": "t",
            "sessionId": "s",
            "agent": "a",
            "configHash": "c",
            "startSeq": 1,
            "createdAt": 2,
            "dueAt": 3,
            "usage": {"inputTokens": 3, "modelCalls": 1},
        },
    ),
    "checkpoint before tenants and results": (
        TurnCheckpoint,
        {"id": "c", "turnId": "t", "sessionId": "s", "agent": "a", "outstanding": {}, "createdAt": 5},
    ),
    "notification with null due time": (
        OutboxRecord,
        {
            "eventId": "e",
            "turnId": "t",
            "agent": "a",
            "configHash": "c",
            "event": "x",
            "payload": {},
            "createdAt": 1,
            "attempts": 2.0,
            "dueAt": None,
        },
    ),
}

WRITTEN = {
    "bare item": (
        '{"pendingId":"pnd_1","toolUseId":"toolu_1","tool":"issue_refund","args":{"amount":5}'
        ',"reason":"ask","kind":"approval","argsHash":"h1"}'
    ),
    "item with expiry and approvers": (
        '{"expiresAt":12.5,"onExpiry":"deny","pendingId":"pnd_2","toolUseId":"toolu_2","tool"'
        ':"system_ask_user","args":{},"reason":"","kind":"question","argsHash":"","approvers"'
        ':["a@x"]}'
    ),
    "open checkpoint": (
        '{"id":"cp_1","turnId":"trn_1","sessionId":"ses_1","agent":"a","tenant":"","resultsSo'
        'Far":[],"outstanding":{"pnd_1":{"pendingId":"pnd_1","toolUseId":"toolu_1","tool":"is'
        'sue_refund","args":{"amount":5},"reason":"ask","kind":"approval","argsHash":"h1"}},"'
        'createdAt":100.0,"version":0}'
    ),
    "closed checkpoint": (
        '{"id":"cp_1","turnId":"trn_1","sessionId":"ses_1","agent":"a","tenant":"acme","resul'
        'tsSoFar":[{"type":"tool_result","tool_use_id":"toolu_0","content":"{\\"ok\\":1}"}],"ou'
        'tstanding":{"pnd_2":{"expiresAt":12.5,"onExpiry":"deny","pendingId":"pnd_2","toolUse'
        'Id":"toolu_2","tool":"system_ask_user","args":{},"reason":"","kind":"question","args'
        'Hash":"","approvers":["a@x"]}},"approved":{"pnd_1":{"pendingId":"pnd_1","toolUseId":'
        '"toolu_1","tool":"issue_refund","args":{"amount":5},"reason":"ask","kind":"approval"'
        ',"argsHash":"h1"}},"closed":true,"denied":true,"decisions":[{"pendingId":"pnd_1","to'
        'ol":"t","decision":"approve","at":1.0,"decidedBy":"x","channel":null},{"pendingId":"'
        'pnd_2","tool":"t","decision":"skipped","at":2.0,"decidedBy":"cascade","channel":null'
        '}],"createdAt":100.5,"version":3,"answerAt":4,"order":["toolu_1","toolu_2"]}'
    ),
    "new turn": (
        '{"turnId":"trn_1","sessionId":"ses_1","agent":"a","tenant":"acme","configHash":"cfg"'
        ',"startSeq":0,"createdAt":10.0,"trigger":"message","status":"running","version":0}'
    ),
    "turn with every field": (
        '{"turnId":"trn_1","sessionId":"ses_1","agent":"a","tenant":"","configHash":"cfg","st'
        'artSeq":5,"createdAt":10.0,"trigger":"schedule","status":"paused","stopReason":"deni'
        'ed","text":"","checkpointId":"cp_1","verdicts":{"toolu_1":{"decision":"ask"}},"lease'
        'Until":3.0,"codeVersion":"v1","updatedAt":4.0,"stopRequested":"cancelled","stickyToo'
        'ls":["a","b"],"queuedMessage":"hi","queuedBehind":true,"scopedSession":true,"runner"'
        ':"r","dueAt":9.0,"modelFailures":2,"live":true,"usage":[1,2,3,4,5],"counted":[1,0,0,'
        '0,1],"version":7}'
    ),
    "started call": (
        '{"turnId":"trn_1","toolUseId":"toolu_1","tool":"lookup","startedAt":1.0,"outcome":nu'
        'll,"result":null,"finishedAt":null}'
    ),
    "finished call": (
        '{"turnId":"trn_1","toolUseId":"toolu_1","tool":"lookup","startedAt":1.0,"outcome":"o'
        'k","result":{"type":"tool_result"},"finishedAt":2.0}'
    ),
    "pending notification": (
        '{"eventId":"evt_1","turnId":"trn_1","agent":"a","configHash":"cfg","event":"approval'
        '","payload":{"eventId":"evt_1"},"createdAt":1.0,"attempts":0,"state":"pending","dueA'
        't":null,"lastError":null}'
    ),
    "notification given up": (
        '{"eventId":"evt_1","turnId":"trn_1","agent":"a","configHash":"cfg","event":"approval'
        '","payload":{"eventId":"evt_1"},"createdAt":1.0,"attempts":10,"state":"failed","dueA'
        't":null,"lastError":"boom","held":true,"target":"t1"}'
    ),
    "idempotency key": (
        '{"key":"idk_1","requestHash":"sha256:x","turnId":"trn_1","createdAt":1.0,"expiresAt":2.0}'
    ),
    "trim": '{"upTo":3}',
    "summary": '{"upTo":4,"summary":"the story so far"}',
    "mcp pin": '{"server":"shop","tool":"refund","schemaHash":"sha256:y"}',
}
READ_BACK = {
    "item before kinds and hashes": (
        '{"pendingId":"p","toolUseId":"u","tool":"t","args":{},"reason":"r","kind":"approval","argsHash":""}'
    ),
    "turn before tenants, usage as JSON": (
        '{"turnId":"t","sessionId":"s","agent":"a","tenant":"","configHash":"c","startSeq":1,'
        '"createdAt":2.0,"trigger":"message","status":"running","dueAt":3.0,"usage":[0,0,0,0,'
        '1],"version":0}'
    ),
    "checkpoint before tenants and results": (
        '{"id":"c","turnId":"t","sessionId":"s","agent":"a","tenant":"","resultsSoFar":[],"ou'
        'tstanding":{},"createdAt":5.0,"version":0}'
    ),
    "notification with null due time": (
        '{"eventId":"e","turnId":"t","agent":"a","configHash":"c","event":"x","payload":{},"c'
        'reatedAt":1.0,"attempts":2,"state":"pending","dueAt":null,"lastError":null}'
    ),
}


def dumps(stored: object) -> str:
    return json.dumps(stored, separators=(",", ":"))


@pytest.mark.parametrize("name", RECORDS)
def test_a_record_writes_the_bytes_it_always_wrote_and_reads_back_equal(name: str) -> None:
    record = RECORDS[name]
    assert dumps(record.to_dict()) == WRITTEN[name]
    assert type(record).from_dict(json.loads(WRITTEN[name])) == record


@pytest.mark.parametrize("name", OLDER)
def test_an_older_record_still_parses_and_writes_its_defaults_as_before(name: str) -> None:
    cls, stored = OLDER[name]
    assert dumps(cls.from_dict(stored).to_dict()) == READ_BACK[name]


def test_a_record_missing_a_required_key_is_refused() -> None:
    stored = RECORDS["new turn"].to_dict()
    del stored["configHash"]
    with pytest.raises(KeyError):
        TurnRecord.from_dict(stored)
