"""The files ``loopengine new-agent`` writes (``$name``: route name, ``$module``: folder name).

Kept as Python strings so they ship inside the package however it is installed. The agent opens
tickets (``create_ticket``: urgent ones after a person's yes) and charges customers through a
payment API (``charge``: always after a person's yes), sending the call's idempotency key; the
folder brings a stand-in for that API (:mod:`.scaffold_standin`) so everything runs offline.
"""

from __future__ import annotations

AGENT_YAML = """\
# $name: created by `loopengine new-agent`. Every key is explained in docs/agents.md.
name: $name
model: claude-sonnet-4-5
max_tokens: 1024
max_iterations: 10
tools: [create_ticket, charge]
system: |
  You are the $name agent. When the user reports a problem, open a ticket for it with
  create_ticket (priority "high" only when it is urgent). When they ask you to charge a customer,
  use charge with the amount in cents. If a tool result says it was denied, skipped or that its
  outcome is unknown, say so plainly and never claim it happened.
on_new_message: supersede   # a new message abandons a wait (supersede | reject | queue)
pending_ttl: 72h            # nobody answered within 72h -> the model is told so
tool_timeouts:              # past it a call is recorded `unknown` (default 20s, at most 10m)
  charge: 10s
"""

RULES_YAML = """\
# The gate: first matching rule wins; a call no rule matches gets default_decision.
rules:
  - tool: create_ticket
    when: {field: priority, op: eq, value: low}
    decision: allow
  - tool: create_ticket
    decision: ask
    reason: high-priority tickets page someone; a person confirms first
    # approvers: [user:alice, group:support-leads]   # who may decide (a bare name means user:)
  - tool: charge
    decision: ask
    reason: it moves a customer's money; a person confirms the amount first
default_decision: ask
"""

TOOLS_PY = '''\
"""$name: its tools.

TOOLS is the list the agent offers the model (see docs/agents.md).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any, Literal

from pydantic import BaseModel, Field

from loopengine import Tool, ToolContext, new_id, tool_from_model

CREATED: list[dict[str, Any]] = []
PAYMENTS_URL = "http://127.0.0.1:8790"
"""The payment API: payments_standin.py by default; set PAYMENTS_URL for another one."""


class CreateTicket(BaseModel):
    """Arguments of create_ticket (the model sees this schema, reviewers see these fields)."""

    title: str = Field(description="One line saying what is wrong.")
    priority: Literal["low", "high"] = Field(description="high pages someone; low waits for office hours.")


class Charge(BaseModel):
    """Arguments of charge."""

    customer: str = Field(description="Who pays: the customer's email address.")
    amount_cents: int = Field(gt=0, le=100_000, description="How much, in cents: 1250 is 12.50.")
    currency: Literal["usd", "eur"] = Field(default="usd", description="The currency.")
    reason: str = Field(description="What the charge is for (the customer sees it).")


def create_ticket(args: CreateTicket) -> dict[str, Any]:
    """Open the ticket (here: remember it; replace with your ticketing system's API)."""
    ticket = {"ticket_id": new_id("tk_")[:12], "title": args.title, "priority": args.priority}
    CREATED.append(ticket)
    return {**ticket, "status": "open"}


def charge(args: Charge, ctx: ToolContext) -> dict[str, Any]:
    """Charge the customer through the payment API, at most once.

    ``ctx.idempotency_key`` is the same for this call in every process, every resume and every
    retry, so the provider drops a second request with it. When the outcome is unknown (the
    process died mid-call, or the call outlived its timeout), look the charge up by that key:
    GET /charges?idempotency_key=<key>; the turn's audit (GET /turns/{id}) shows it.
    """
    ctx.check()  # the turn was stopped before anything was sent: charge nothing
    body = {**args.model_dump(), "metadata": {"turn_id": ctx.turn_id, "approved_by": ctx.decided_by}}
    request = urllib.request.Request(
        os.environ.get("PAYMENTS_URL", PAYMENTS_URL).rstrip("/") + "/charges",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": ctx.idempotency_key},
    )
    try:
        # no client timeout shorter than the tool's own: a provider that hangs makes the call
        # `unknown` (it may have charged), never an error that invites charging again
        with urllib.request.urlopen(request, timeout=ctx.remaining() + 5) as reply:
            paid = json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"the payment API refused the charge ({exc.code}): {exc.read()[:200]!r}") from None
    return {
        "charge_id": paid["id"],
        "amount_cents": paid["amount_cents"],
        "currency": paid["currency"],
        "status": paid["status"],
    }


TOOLS: list[Tool] = [
    tool_from_model("create_ticket", "Open a support ticket.", CreateTicket, create_ticket),
    tool_from_model("charge", "Charge a customer (amount in cents).", Charge, charge),
]
'''

SCRIPT_PY = '''\
"""The offline stand-in for the model (LOOPENGINE_MODEL=scripted, or no ANTHROPIC_API_KEY).

It reads only the conversation, so a turn resumed in another process continues correctly:
"charge 12.50 to a@example.com ..." charges the customer; any other message opens a ticket
(priority high when it says "urgent"); the result becomes the reply.
"""

from __future__ import annotations

import json
import re
from typing import Any

from loopengine import ModelRequest, ModelResponse, call, say, use

AMOUNT = re.compile(r"\\b(\\d{1,4}(?:\\.\\d{1,2})?)\\b")
EMAIL = re.compile(r"[\\w.+-]+@[\\w-]+(?:\\.[\\w-]+)+")


def respond(request: ModelRequest) -> ModelResponse:
    """The next response for the conversation in ``request``."""
    last = request.messages[-1]
    if last.tool_results:
        tool = request.messages[-2].tool_uses[0].name
        return say(_report(tool, _result(last.tool_results[0].content)))
    text = last.text.strip()
    amount = AMOUNT.search(text)
    if "charge" in text.lower() and amount:
        email = EMAIL.search(text)
        args = {
            "customer": email.group(0) if email else "unknown",
            "amount_cents": round(float(amount.group(1)) * 100),
            "reason": text[:80],
        }
        return call(use("charge", args))
    priority = "high" if "urgent" in text.lower() else "low"
    return call(use("create_ticket", {"title": text[:80], "priority": priority}))


def _result(text: str) -> Any:
    """A tool's result as data; a call a reviewer edited says so around it."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict) and "reviewer_edited_args" in value:
        return value.get("result")  # {"reviewer_edited_args": {...}, "result": <what the tool returned>}
    return value


def _report(tool: str, result: Any) -> str:
    status = result.get("status") if isinstance(result, dict) else None
    if status == "unknown":
        return "I cannot confirm whether that happened; please check before trying again."
    if tool == "charge":
        if status != "succeeded":
            return f"I could not charge the customer: it was {status or 'not confirmed'}."
        amount = result["amount_cents"] / 100
        return f"I charged {amount:.2f} {result['currency'].upper()} ({result['charge_id']})."
    if status != "open":
        return f"I could not open the ticket: it was {status or 'not confirmed'}."
    return f"I opened ticket {result['ticket_id']} ({result['priority']} priority)."
'''

TEST_PY = '''\
"""$name, offline: tickets, approvals, charges.

Urgent tickets wait for a person's yes; a charge always does, then goes to the stand-in payment API
(payments_standin.py, started here as a process of its own) with the call's idempotency key, and
goes through once however often it is sent.

Run: python <this file>   (no pytest needed; pytest runs the same tests)
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import unittest
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loopengine import AgentRegistry, Approval, Engine, Principal, ToolContext, build_engine

HERE = Path(__file__).resolve().parent
AGENT = "$name"
ALICE = Principal("user:alice", "user")
CHARGE = "Please charge 12.50 to a@example.com for the broken mug"


@contextlib.contextmanager
def engine() -> Iterator[Engine]:
    """The engine on a fresh SQLite file with the offline model, finding this folder's agent."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"LOOPENGINE_DB": str(Path(tmp) / "test.db"), "LOOPENGINE_MODEL": "scripted"}
        built = build_engine(env, registry=AgentRegistry(package=None, paths=[HERE.parent]))
        try:
            yield built
        finally:
            built.rt.stores.close()


@contextlib.contextmanager
def payments() -> Iterator[str]:
    """payments_standin.py as a process of its own on a free port; the charge tool is pointed at it."""
    command = [sys.executable, str(HERE / "payments_standin.py"), "--port", "0"]
    before = os.environ.get("PAYMENTS_URL")
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().split()[-1]  # "payments stand-in on http://127.0.0.1:PORT"
            os.environ["PAYMENTS_URL"] = url
            yield url
        finally:
            os.environ.pop("PAYMENTS_URL", None)
            if before is not None:
                os.environ["PAYMENTS_URL"] = before
            proc.terminate()


def charges(url: str, key: str | None = None) -> list[dict[str, Any]]:
    """The stand-in's charges (those made with ``key``)."""
    query = f"?idempotency_key={key}" if key else ""
    with urllib.request.urlopen(f"{url}/charges{query}", timeout=10) as reply:
        found: list[dict[str, Any]] = json.loads(reply.read())["charges"]
        return found


class Tickets(unittest.TestCase):
    """create_ticket: low priority runs unasked, high priority after a person's yes."""

    def setUp(self) -> None:
        self.engine = self.enterContext(engine())

    def test_the_folder_is_valid(self) -> None:
        [status] = [s for s in AgentRegistry(package=None, paths=[HERE.parent]).check() if s.folder == HERE]
        self.assertEqual(status.problems, ())

    def test_a_low_priority_ticket_needs_nobody(self) -> None:
        out = self.engine.send_message(AGENT, "The printer is low on toner")
        self.assertEqual(out.status.value, "finished")
        self.assertIn("opened ticket", out.text or "")

    def test_an_urgent_ticket_waits_for_approval(self) -> None:
        out = self.engine.send_message(AGENT, "Urgent: the shop is down")
        self.assertEqual(out.status.value, "paused")
        [item] = out.pending
        self.assertEqual((item.tool, item.args["priority"]), ("create_ticket", "high"))

        self.engine.resolve(item.pending_id, Approval(), ALICE)

        done = self.engine.outcome(out.turn_id)
        self.assertEqual(done.status.value, "finished")
        self.assertIn("opened ticket", done.text or "")

    def test_an_edited_ticket_opens_as_edited(self) -> None:
        out = self.engine.send_message(AGENT, "Urgent: the shop is down")
        edited = {"title": "Shop down since 9:00", "priority": "high"}
        self.engine.resolve(out.pending[0].pending_id, Approval(edited_args=edited), ALICE)
        self.assertIn("opened ticket", self.engine.outcome(out.turn_id).text or "")


class Charges(unittest.TestCase):
    """charge: after a person's yes, once per idempotency key, through the stand-in payment API."""

    def setUp(self) -> None:
        self.url = self.enterContext(payments())
        self.engine = self.enterContext(engine())

    def test_a_charge_waits_for_a_person_then_charges_once_with_the_calls_key(self) -> None:
        out = self.engine.send_message(AGENT, CHARGE)
        [item] = out.pending
        self.assertEqual((item.tool, item.args["amount_cents"]), ("charge", 1250))
        self.assertEqual(charges(self.url), [])

        self.engine.resolve(item.pending_id, Approval(), ALICE)

        self.assertIn("I charged 12.50 USD", self.engine.outcome(out.turn_id).text or "")
        key = ToolContext.key_for("", out.turn_id, item.tool_use_id)  # what an operator computes
        [charge] = charges(self.url, key)
        self.assertEqual(charges(self.url), [charge])
        self.assertEqual(charge["metadata"]["approved_by"], "user:alice")

    def test_a_retry_with_the_same_key_charges_nothing_more(self) -> None:
        tool = self.engine.rt.agents.get(AGENT).tool("charge")
        assert tool is not None
        args = {"customer": "a@example.com", "amount_cents": 700, "reason": "a retried request"}
        ctx = ToolContext.for_call(turn_id="trn_retry", call_id="toolu_1")
        first, again = tool.execute(args, ctx), tool.execute(args, ctx)  # e.g. a client retrying
        self.assertEqual(first, again)
        self.assertEqual(len(charges(self.url)), 1)
        other = ToolContext.for_call(turn_id="trn_retry", call_id="toolu_2")  # another call: its own key
        self.assertNotEqual(tool.execute(args, other)["charge_id"], first["charge_id"])
        self.assertEqual(len(charges(self.url)), 2)


if __name__ == "__main__":
    unittest.main()
'''
