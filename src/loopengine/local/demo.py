"""``loopengine demo``: seed 003's walkthrough, offline, on the embedded store.

Everything runs through the code a deployment runs (engine, loop, gate, checkpoint store, signed
webhook over real HTTP to a local receiver that verifies it) with one stand-in: the scripted model.
"""

from __future__ import annotations

import json
import secrets
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from loopengine.app import views
from loopengine.app.engine import Engine
from loopengine.app.invokers import InlineInvoker
from loopengine.app.outcome import TurnOutcome
from loopengine.app.request.resolution import Decider
from loopengine.bootstrap import DEFAULT_DB, build_runtime
from loopengine.channels.webhook.verify import ReceivedWebhook, WebhookReceiver
from loopengine.domain.base.clock import SystemClock
from loopengine.domain.decisions import Approval, Denial
from loopengine.stores.sqlite import open_sqlite_stores

AGENT = "customer-service"
REVIEWER = Decider(identity="ops@example.com", channel="demo")


class Transcript:
    """Readable, step-by-step output."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.step = 0

    def title(self, text: str) -> None:
        """A section heading."""
        print(f"\n=== {text} " + "=" * max(0, 70 - len(text)), file=self.out)

    def say(self, text: str) -> None:
        """One numbered step."""
        self.step += 1
        print(f"\n[{self.step}] {text}", file=self.out)

    def detail(self, text: str) -> None:
        """An indented line under the current step."""
        print(f"    {text}", file=self.out)

    def body(self, status: int, body: Any) -> None:
        """An HTTP-style answer, as the API would send it."""
        text = json.dumps(views.wire(body), indent=2, sort_keys=False)
        self.detail(f"-> {status} " + text.replace("\n", "\n       "))


def run_demo(db_path: str, fresh: bool = True, out: TextIO = sys.stdout) -> int:
    """Run the walkthrough; return a process exit code (0 when every check held)."""
    path = Path(db_path)
    if fresh:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    t = Transcript(out)
    secret = secrets.token_hex(16)
    clock = SystemClock()
    stores = open_sqlite_stores(str(path), clock)
    with WebhookReceiver(secret) as rx:
        env = {
            "LOOPENGINE_MODEL": "scripted",
            "LOOPENGINE_DEFAULT_WEBHOOK_URL": rx.url,
            "LOOPENGINE_DEFAULT_WEBHOOK_SECRET": secret,
            "LOOPENGINE_PUBLIC_URL": "http://127.0.0.1:8787",
        }
        invoker = InlineInvoker()
        engine = Engine(build_runtime(env, invoker=invoker, stores=stores, clock=clock))
        invoker.resume = engine.resume
        t.title("loopengine demo: a durable approval, end to end (offline)")
        t.detail(f"store: SQLite at {path}   model: scripted   webhook receiver: {rx.url}")
        checks = [
            _walkthrough(engine, rx, t),
            _cascade(engine, rx, t),
            _moved_on(engine, rx, t),
        ]
    stores.close()
    ok = all(checks)
    t.title("done" if ok else "FAILED")
    if ok:
        t.detail(f"every pause, decision and outcome above is in the store {path}; to serve it over HTTP:")
        t.detail(f"  {serve_command(path)}")
        t.detail("  curl -s localhost:8787/turns/<a turnId above>")
    else:
        t.detail("a check did not hold; see above")
    return 0 if ok else 1


def serve_command(path: Path) -> str:
    """The exact command that serves the store at ``path`` (``make dev`` alone serves the default one)."""
    if path.resolve() == Path(DEFAULT_DB).resolve():
        return "make dev"
    return f"LOOPENGINE_DB={shlex.quote(str(path))} make dev"


def _webhook(rx: WebhookReceiver, event: str, t: Transcript) -> ReceivedWebhook:
    got = rx.wait_for(event, timeout=5)
    mark = "signature verified" if got.verified else f"REJECTED ({got.reason})"
    t.detail(f"webhook received: event={got.event}, {got.header} {mark}")
    return got


def _show_pause(out: Any, t: Transcript) -> None:
    for item in out.pending:
        t.detail(f"paused on {item.tool} {json.dumps(item.args)}")
        t.detail(f"  why: {item.reason}")
        t.detail(f"  pendingId: {item.pending_id}")


def _post(engine: Engine, t: Transcript, message: str) -> TurnOutcome:
    t.say(f'POST /agents/{AGENT}/messages  {{"message": "{message}"}}')
    return engine.send_message(AGENT, message)


def _parked(engine: Engine, rx: WebhookReceiver, t: Transcript, message: str, approvals: int) -> TurnOutcome:
    """Post ``message``; show the pause it comes to and its ``approvals`` approval webhooks."""
    out = _post(engine, t, message)
    _show_pause(out, t)
    for _ in range(approvals):
        _webhook(rx, "approval", t)
    return out


def _ran(engine: Engine, turn_id: str) -> list[str]:
    events = engine.rt.stores.turns.events(turn_id)
    return [f"{e['tool']}: {e['outcome']}" for e in events if e["type"] == "tool_outcome"]


def _walkthrough(engine: Engine, rx: WebhookReceiver, t: Transcript) -> bool:
    t.title("1. a message comes in, nobody watching")
    out = _post(engine, t, "Order A-1001 arrived broken, please refund it.")
    turn_id = out.turn_id
    t.detail("tool calls that ran on their own: " + ", ".join(_ran(engine, turn_id)))
    _show_pause(out, t)
    t.body(*views.turn_outcome(out))
    first = out.pending[0]
    t.say("the process could exit now; the pending item went out as a signed webhook")
    hook = _webhook(rx, "approval", t)
    t.detail(f"resolveUrl: {hook.payload['resolveUrl']}   argsHash: {hook.payload['argsHash']}")

    t.title("2. a human approves, whenever they get to it")
    t.say(f'POST /pending-approvals/{first.pending_id}/resolve  {{"decision": "approve"}}')
    res = engine.resolve(first.pending_id, Approval(), REVIEWER)
    t.body(*views.resolution(res))
    out = engine.outcome(turn_id)
    t.detail("the turn resumed from its checkpoint: " + ", ".join(_ran(engine, turn_id)[1:]))
    t.say("resuming can pause again: the confirmation email has intent 'refund', not tracking_info")
    _show_pause(out, t)
    _webhook(rx, "approval", t)
    second = out.pending[0]

    t.say(f'POST /pending-approvals/{second.pending_id}/resolve  {{"decision": "approve"}}')
    res = engine.resolve(second.pending_id, Approval(), REVIEWER)
    t.body(*views.resolution(res))
    out = engine.outcome(turn_id)
    t.say("the turn finished for real")
    t.body(*views.turn_outcome(out))
    fin = _webhook(rx, "run_finish", t)
    t.detail(f"run_finish text: {fin.payload.get('text')!r}")

    t.say(f"late click on the first item again: POST /pending-approvals/{first.pending_id}/resolve")
    late = engine.resolve(first.pending_id, Approval(), REVIEWER)
    t.body(*views.resolution(late))
    return _check(
        t,
        [
            (
                "turn finished with end_turn",
                out.stop_reason is not None and out.stop_reason.value == "end_turn",
            ),
            ("late click was a no-op", late.already_resolved),
            ("refund ran exactly once", _count(engine, turn_id, "issue_refund") == 1),
        ],
    )


def _cascade(engine: Engine, rx: WebhookReceiver, t: Transcript) -> bool:
    t.title("3. cascade-skip: two pending calls in one batch, one denied")
    message = "Order A-1001 arrived broken. Refund it and email me the confirmation right away."
    out = _parked(engine, rx, t, message, approvals=2)
    refund = next(p for p in out.pending if p.tool == "issue_refund")
    email = next(p for p in out.pending if p.tool == "send_email")
    comment = "Refunds over 200 USD need a manager's sign-off."
    t.say(f"deny the refund: POST /pending-approvals/{refund.pending_id}/resolve")
    t.detail(f'{{"decision": "deny", "comment": "{comment}"}}')
    res = engine.resolve(refund.pending_id, Denial(comment=comment), REVIEWER)
    t.body(*views.resolution(res))
    history = engine.rt.stores.sessions.load(out.session_id)
    t.detail("the batch's one tool_result message, pushed at once:")
    for block in history[-1].tool_results:
        status = json.loads(block.content).get("status")
        name = next(u.name for u in history[-2].tool_uses if u.id == block.tool_use_id)
        t.detail(f"  {name}: {status}")
    t.say(f"late click on the skipped email: POST /pending-approvals/{email.pending_id}/resolve")
    late = engine.resolve(email.pending_id, Approval(), REVIEWER)
    t.body(*views.resolution(late))
    turn = engine.turn(out.turn_id)
    return _check(
        t,
        [
            ("turn stopped as denied", turn.stop_reason is not None and turn.stop_reason.value == "denied"),
            ("late click was a no-op", late.already_resolved),
            ("nothing in the denied batch ran", _count(engine, out.turn_id, "send_email") == 0),
        ],
    )


def _moved_on(engine: Engine, rx: WebhookReceiver, t: Transcript) -> bool:
    t.title("4. the user moves on: a new message supersedes the wait")
    out = _parked(engine, rx, t, "Order A-1001 arrived broken, please refund it.", approvals=1)
    parked = out.pending[0]
    second = "Actually, order A-1002: where is it?"
    t.say(f'same session, a new message: {{"message": "{second}", "sessionId": "{out.session_id}"}}')
    new = engine.send_message(AGENT, second, session_id=out.session_id)
    old = engine.turn(out.turn_id)
    t.detail(f"the parked turn ended: stopReason={old.stop_reason.value if old.stop_reason else None}")
    history = engine.rt.stores.sessions.load(out.session_id)
    abandoned = next(
        json.loads(r.content) for m in history for r in m.tool_results if r.tool_use_id == parked.tool_use_id
    )
    t.detail(f"its refund was recorded as {abandoned['status']}: {abandoned['reason']}")
    t.body(*views.turn_outcome(new))
    t.say(f"Monday's late click on the abandoned refund: POST /pending-approvals/{parked.pending_id}/resolve")
    late = engine.resolve(parked.pending_id, Approval(), REVIEWER)
    t.body(*views.resolution(late))
    return _check(
        t,
        [
            ("old turn superseded", old.stop_reason is not None and old.stop_reason.value == "superseded"),
            ("abandoned item is unknown, not denied", abandoned["status"] == "unknown"),
            ("late click was a no-op", late.already_resolved),
            ("nothing was refunded", _count(engine, out.turn_id, "issue_refund") == 0),
        ],
    )


def _count(engine: Engine, turn_id: str, tool: str) -> int:
    calls = engine.rt.stores.turns.calls(turn_id).values()
    return sum(1 for c in calls if c.tool == tool and c.outcome == "ok")


def _check(t: Transcript, checks: list[tuple[str, bool]]) -> bool:
    for name, held in checks:
        t.detail(("ok   " if held else "FAIL ") + name)
    return all(held for _, held in checks)


Main = Callable[[list[str]], int]
