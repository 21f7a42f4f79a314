"""The files ``loopengine new-agent`` writes (``$name``: route name, ``$module``: folder name).

Kept as Python strings so they ship inside the package however it is installed.
"""

from __future__ import annotations

AGENT_YAML = """\
# $name: created by `loopengine new-agent`. Every key is explained in docs/agents.md.
name: $name
model: claude-sonnet-4-5
max_tokens: 1024
max_iterations: 10
tools: [create_ticket]
system: |
  You are the $name agent. When the user reports a problem, open a ticket for it with
  create_ticket (priority "high" only when it is urgent). If a tool result says it was denied,
  skipped or that its outcome is unknown, say so plainly and never claim it happened.
on_new_message: supersede   # a new message abandons a wait (supersede | reject | queue)
pending_ttl: 72h            # nobody answered within 72h -> the model is told so
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
default_decision: ask
"""

TOOLS_PY = '''\
"""$name tools: TOOLS is the list the agent offers the model (see docs/agents.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from loopengine import Tool, new_id, tool_from_model

CREATED: list[dict[str, Any]] = []


class CreateTicket(BaseModel):
    """Arguments of create_ticket (the model sees this schema, reviewers see these fields)."""

    title: str = Field(description="One line saying what is wrong.")
    priority: Literal["low", "high"] = Field(description="high pages someone; low waits for office hours.")


def create_ticket(args: CreateTicket) -> dict[str, Any]:
    """Open the ticket (here: remember it; replace with your ticketing system's API)."""
    ticket = {"ticket_id": new_id("tk_")[:12], "title": args.title, "priority": args.priority}
    CREATED.append(ticket)
    return {**ticket, "status": "open"}


TOOLS: list[Tool] = [
    tool_from_model("create_ticket", "Open a support ticket.", CreateTicket, create_ticket),
]
'''

SCRIPT_PY = '''\
"""The offline stand-in for the model (LOOPENGINE_MODEL=scripted, or no ANTHROPIC_API_KEY).

It reads only the conversation, so a turn resumed in another process continues correctly:
a message opens a ticket (priority high when it says "urgent"); the result becomes the reply.
"""

from __future__ import annotations

import json
from typing import Any

from loopengine import ModelRequest, ModelResponse, call, say, use


def respond(request: ModelRequest) -> ModelResponse:
    """The next response for the conversation in ``request``."""
    last = request.messages[-1]
    if last.tool_results:
        result = _json(last.tool_results[0].content)
        status = result.get("status") if isinstance(result, dict) else None
        if status != "open":
            return say(f"I could not open the ticket: it was {status or 'not confirmed'}.")
        return say(f"I opened ticket {result['ticket_id']} ({result['priority']} priority).")
    text = last.text.strip()
    priority = "high" if "urgent" in text.lower() else "low"
    return call(use("create_ticket", {"title": text[:80], "priority": priority}))


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
'''

TEST_PY = '''\
"""$name, offline: a low-priority ticket opens at once; an urgent one waits for a person.

Run: pytest $module/test_$module.py (from the folder that holds $module/).
"""

from __future__ import annotations

from pathlib import Path

from loopengine import AgentRegistry, Engine, Principal, build_engine

HERE = Path(__file__).resolve().parent


def _engine(tmp_path: Path) -> Engine:
    env = {"LOOPENGINE_DB": str(tmp_path / "test.db"), "LOOPENGINE_MODEL": "scripted"}
    return build_engine(env, registry=AgentRegistry(package=None, paths=[HERE.parent]))


def test_the_folder_is_valid() -> None:
    [status] = [s for s in AgentRegistry(package=None, paths=[HERE.parent]).check() if s.folder == HERE]
    assert status.problems == ()


def test_a_low_priority_ticket_needs_nobody(tmp_path: Path) -> None:
    out = _engine(tmp_path).send_message("$name", "The printer is low on toner")
    assert out.status.value == "finished" and "opened ticket" in (out.text or "")


def test_an_urgent_ticket_waits_for_approval(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    out = engine.send_message("$name", "Urgent: the shop is down")
    assert out.status.value == "paused"
    [item] = out.pending
    assert item.tool == "create_ticket" and item.args["priority"] == "high"

    engine.resolve(item.pending_id, "approve", Principal("user:alice", "test"))

    done = engine.outcome(out.turn_id)
    assert done.status.value == "finished" and "opened ticket" in (done.text or "")
'''
