"""``loopengine admin`` as an operator runs it: against SQLite, and against DynamoDB and SQS under moto.

The command is run through the console script's ``main`` with the environment a shell would give it
(``LOOPENGINE_DB`` or ``LOOPENGINE_TABLE``, ``LOOPENGINE_DLQ_URL``, ``LOOPENGINE_AGENTS_PATH``); the
turns it repairs were left behind by an engine built from the same environment whose resumes were
never delivered (a lost or dead-lettered async invoke), or whose resume died mid-call. The agent's
tool appends each run to a file, so "the tool ran once" is counted across every engine involved.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.app import faults
from loopengine.app.engine import Engine
from loopengine.app.invokers import RecordingInvoker
from loopengine.app.request.resolution import Decider
from loopengine.bootstrap import build_engine
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.decisions import Approval
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.local.cli import main
from tests.agent_folders import calls, write_agent
from tests.contract.conftest import fake_session, moto_dynamodb

REVIEWER = Decider("ops@example.com")
ONE_REFUND = """\
from loopengine.models.scripted import call, say, use


def respond(request):
    msgs = request.messages
    start = max(i for i, m in enumerate(msgs) if m.role == "user" and m.text)
    if not any(m.tool_results for m in msgs[start + 1 :]):
        return call(use("refund", {"x": 1}))
    return say("all done")
"""


class Died(BaseException):
    """The resume's process died (Lambda's timeout, an out-of-memory kill)."""


def admin(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``loopengine admin ARGV``: exit status, stdout, stderr."""
    capsys.readouterr()
    status = main(["admin", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def admin_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    status, out, err = admin(capsys, *argv, "--json")
    assert "Traceback" not in err, err
    return status, json.loads(out)


def engine_for(env: dict[str, str], clock: FakeClock | None = None) -> tuple[Engine, RecordingInvoker]:
    """The deployment's engine, except that its resumes are never delivered."""
    lost = RecordingInvoker()
    return build_engine(env, invoker=lost, clock=clock), lost


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, str], Path]:
    """An agent ``shop`` whose ``refund`` asks for approval; the environment to reach it."""
    agents = tmp_path / "agents"
    folder = write_agent(agents, "shop")
    env = {
        "LOOPENGINE_AGENTS_PATH": str(agents),
        "LOOPENGINE_MODEL": "scripted",
        "LOOPENGINE_OPERATOR": "oncall",
    }
    for name in ("LOOPENGINE_TABLE", "LOOPENGINE_RESUME_FUNCTION", "LOOPENGINE_DLQ_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env, folder


def test_sqlite_find_redrive_and_expire_a_stuck_turn(
    shop: tuple[dict[str, str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env, folder = shop
    env["LOOPENGINE_DB"] = str(tmp_path / "store.db")
    monkeypatch.setenv("LOOPENGINE_DB", env["LOOPENGINE_DB"])
    # GIVEN a turn approved whose resume never arrived (the invoke was lost)
    engine, lost = engine_for(env)
    paused = engine.send_message("shop", "refund both")
    engine.resolve(paused.pending[0].pending_id, Approval(), REVIEWER)
    turn_id = paused.turn_id
    assert lost.invoked == [turn_id] and engine.turn(turn_id).status is TurnStatus.READY
    engine.rt.stores.close()

    # WHEN the operator looks for turns waiting on a worker, it is listed
    status, listed = admin_json(capsys, "turns", "--status", "ready", "--agent", "shop", "--since", "1h")
    assert status == 0 and [t["turnId"] for t in listed["turns"]] == [turn_id]
    assert admin_json(capsys, "turns", "--status", "paused")[1] == {"turns": []}
    status, table, _ = admin(capsys, "turns")
    assert status == 0 and turn_id in table and "ready" in table.splitlines()[1]

    # WHEN it is re-driven: the approved refund runs once, and the turn pauses on the next one
    status, out, _ = admin(capsys, "redrive", turn_id)
    assert status == 0 and "resume invoked" in out
    assert calls(folder) == [1]
    status, shown = admin_json(capsys, "show", turn_id)
    assert shown["turn"]["status"] == "paused"
    redriven = [e for e in shown["audit"] if e["type"] == "redriven"]
    assert redriven == [{**redriven[0], "decidedBy": "user:oncall", "channel": "admin", "status": "ready"}]
    second = [i["pendingId"] for i in shown["items"] if i["fate"] == "open"]
    assert len(second) == 1

    # a second re-drive of a paused turn does nothing (and says why, exit 1)
    status, out, _ = admin(capsys, "redrive", turn_id)
    assert status == 1 and "paused" in out and calls(folder) == [1]

    # WHEN the operator expires the open item: recorded as theirs, the turn finishes, refund 2 never ran
    status, out, _ = admin(capsys, "expire", second[0], "--as", "alice")
    assert status == 0, out
    status, shown = admin_json(capsys, "show", turn_id)
    assert (shown["turn"]["status"], shown["turn"]["stopReason"]) == ("finished", "end_turn")
    expired = [e for e in shown["audit"] if e["type"] == "expired"]
    assert [(e["pendingId"], e["decidedBy"], e["channel"]) for e in expired] == [
        (second[0], "user:alice", "admin")
    ]
    fates = {i["pendingId"]: (i["fate"], (i["decision"] or {}).get("decidedBy")) for i in shown["items"]}
    assert fates[second[0]] == ("expired", "user:alice")
    assert calls(folder) == [1]
    status, out, _ = admin(capsys, "expire", second[0])
    assert status == 1 and "already expired" in out

    # errors are one line, never a stack trace
    for argv, code in ((("show", "trn_nope"), 1), (("turns", "--since", "yesterday-ish"), 2)):
        status, _, err = admin(capsys, *argv)
        assert status == code and err.startswith("loopengine admin: ") and "Traceback" not in err
    monkeypatch.setenv("LOOPENGINE_DB", str(tmp_path / "missing.db"))
    status, _, err = admin(capsys, "turns")
    assert status == 1 and "no store at" in err and not (tmp_path / "missing.db").exists()


def invocation_record(turn_id: str | None, payload: dict[str, Any] | None = None) -> str:
    """The message Lambda sends an on-failure SQS destination for a failed asynchronous invoke."""
    return json.dumps(
        {
            "version": "1.0",
            "timestamp": "2026-05-01T03:02:01.000Z",
            "requestContext": {
                "requestId": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
                "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:loopengine-resume:7",
                "condition": "RetriesExhausted",
                "approximateInvokeCount": 3,
            },
            "requestPayload": payload if payload is not None else {"turnId": turn_id},
            "responseContext": {"statusCode": 200, "executedVersion": "7", "functionError": "Unhandled"},
            "responsePayload": {"errorMessage": "2026-05-01T03:17:01Z Task timed out after 900.00 seconds"},
        }
    )


@pytest.fixture
def aws(
    shop: tuple[dict[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[dict[str, str], Any]]:
    """DynamoDB and SQS under moto: the table, a dead-letter queue, the environment naming both."""
    env, _ = shop
    with moto_dynamodb() as _client:
        sqs = fake_session().client("sqs")
        url = sqs.create_queue(QueueName="loopengine-failures")["QueueUrl"]
        env |= {"LOOPENGINE_TABLE": "loopengine-test", "LOOPENGINE_DLQ_URL": url}
        for key in ("LOOPENGINE_TABLE", "LOOPENGINE_DLQ_URL"):
            monkeypatch.setenv(key, env[key])
        yield env, sqs


def test_a_dead_lettered_resume_is_redriven_once_on_dynamodb(
    shop: tuple[dict[str, str], Path], aws: tuple[dict[str, str], Any], capsys: pytest.CaptureFixture[str]
) -> None:
    env, sqs = aws
    folder = write_agent(Path(env["LOOPENGINE_AGENTS_PATH"]), "shop", script=ONE_REFUND)
    # GIVEN a turn whose approved refund ran, but whose resume died before recording it (an hour ago:
    # its runner's lease has long run out), and Lambda gave up on the event after its retries
    engine, _ = engine_for(env, FakeClock(time.time() - 3600))
    paused = engine.send_message("shop", "refund it")
    engine.resolve(paused.pending[0].pending_id, Approval(), REVIEWER)

    def die_after_the_tool(point: str) -> None:
        if point == "tool_returned":
            raise Died

    with faults.inject(die_after_the_tool), pytest.raises(Died):
        engine.resume(paused.turn_id)
    assert calls(folder) == [1]
    url = env["LOOPENGINE_DLQ_URL"]
    for body in (invocation_record(paused.turn_id), invocation_record(paused.turn_id)):  # delivered twice
        sqs.send_message(QueueUrl=url, MessageBody=body)
    sqs.send_message(
        QueueUrl=url, MessageBody=invocation_record(None, {"agent": "shop", "message": "nightly"})
    )

    # WHEN the operator lists the queue: three failed invocations, all left in it
    status, listed = admin_json(capsys, "dlq", "list")
    assert status == 0 and len(listed["messages"]) == 3
    resumes = [m for m in listed["messages"] if m["turnId"] == paused.turn_id]
    assert [m["turnStatus"] for m in resumes] == ["running", "running"]
    assert {(m["condition"], m["attempts"]) for m in resumes} == {("RetriesExhausted", 3)}
    assert "Task timed out" in resumes[0]["error"]
    assert admin_json(capsys, "dlq", "list")[1] == listed  # listing consumed nothing

    # on DynamoDB a re-drive must say where the resume runs
    status, _, err = admin(capsys, "dlq", "redrive")
    assert status == 1 and "--resume-function" in err and "--inline" in err

    # WHEN it re-drives the queue: the turn finishes once; the refund is not run again but reported unknown
    status, redriven = admin_json(capsys, "dlq", "redrive", "--inline")
    assert status == 1  # the scheduled turn's failure is left for a person
    notes = [(a["turnId"], a["done"]) for a in redriven["actions"]]
    assert sorted(notes, key=str) == sorted(
        [(paused.turn_id, True), (paused.turn_id, True), (None, False)], key=str
    )
    assert calls(folder) == [1]
    turn = engine.turn(paused.turn_id)
    assert (turn.status, turn.stop_reason) == (TurnStatus.FINISHED, StopReason.END_TURN)
    [call] = engine.rt.stores.turns.calls(paused.turn_id).values()
    assert call.outcome == "unknown"
    audit = engine.audit(paused.turn_id)
    kinds = [e["type"] for e in audit]
    assert kinds.count("redriven") == 1 and kinds.count("dead_letter_dismissed") == 1
    redrive = next(e for e in audit if e["type"] == "redriven")
    assert redrive["decidedBy"] == "user:oncall" and redrive["deadLetter"]["requestId"].startswith("0f1e")

    # only the scheduled turn's message is still in the queue (the handled ones were deleted, not hidden)
    held = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=held)["Attributes"]
    assert sum(int(counts[name]) for name in held) == 1
    status, left = admin_json(capsys, "dlq", "list")
    assert [(m["turnId"], m["turnStatus"]) for m in left["messages"]] == [(None, "not a resume")]

    # the operator finds the turn and the call to check with the provider, by its idempotency key
    status, found = admin_json(capsys, "turns", "--status", "finished", "--agent", "shop")
    assert [t["turnId"] for t in found["turns"]] == [paused.turn_id]
    status, out, _ = admin(capsys, "show", paused.turn_id)
    assert status == 0 and "is unknown: it may have run" in out and "le_" in out
