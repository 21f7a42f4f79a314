"""``agent.yaml`` as a strict model, and the checks that span an agent's files.

Every key is listed here (and in docs/agents.md); anything else is an error with its line.
:func:`cross_check` ties agent.yaml, rules.yaml and tools.py together: the tools agent.yaml names
exist in tools.py, and every rule names a tool the agent has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, model_validator

from loopengine.authoring.context import MAX_TOOL_TIMEOUT
from loopengine.authoring.tools import ASK_USER
from loopengine.domain.rules import Duration, JsonValue, NonEmpty, OnExpiry, RulesFile, Strict
from loopengine.domain.yaml_lines import Lines, Problem

CHANNELS = ("webhook", "email", "sns", "slack", "lark", "queue", "redis", "database")
"""Notifier channels (the keys of ``loopengine.channels.base.CHANNELS``)."""
EVENTS = ("approval", "question", "run_start", "run_finish")
AGENT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"
"""Route names: letters, digits, ``-`` and ``_``, up to 63 characters."""

Channel = Literal["webhook", "email", "sns", "slack", "lark", "queue", "redis", "database"]
Event = Literal["approval", "question", "run_start", "run_finish"]
Positive = Annotated[int, Field(gt=0)]


class NotifierModel(Strict):
    """``notifier:`` where this agent's notifications go (wins over the deployment's default webhook)."""

    channel: Channel
    config: dict[str, JsonValue] | None = None
    events: list[Event] | None = None


class AgentFile(Strict):
    """``agent.yaml``."""

    name: Annotated[str, Field(pattern=AGENT_NAME)]
    model: NonEmpty
    system: NonEmpty
    tools: list[NonEmpty] | None = None
    max_tokens: Positive = 1024
    max_iterations: Positive = 10
    notifier: NotifierModel | None = None
    on_new_message: Literal["supersede", "reject", "queue"] = "supersede"
    pending_ttl: Duration | None = None
    on_expiry: OnExpiry | None = None
    live_wait: Duration | None = None
    tool_timeouts: dict[str, Duration] | None = None

    @model_validator(mode="after")
    def _expiry_needs_ttl(self) -> AgentFile:
        if self.on_expiry is not None and self.pending_ttl is None:
            raise ValueError("on_expiry needs a pending_ttl")
        return self

    @model_validator(mode="after")
    def _timeouts_fit_a_worker(self) -> AgentFile:
        for name, seconds in (self.tool_timeouts or {}).items():
            if seconds > MAX_TOOL_TIMEOUT:
                raise ValueError(
                    f"tool_timeouts.{name}: at most {MAX_TOOL_TIMEOUT:g}s (10m), not {seconds:g}s"
                )
        return self


def cross_check(
    agent: AgentFile,
    agent_file: tuple[str, Lines],
    rules: RulesFile | None,
    rules_file: tuple[str, Lines],
    defined: Sequence[str],
) -> tuple[list[str], list[Problem]]:
    """The agent's tool names (in order) and what contradicts across its files."""
    found: list[Problem] = []
    file, lines = agent_file
    wanted = list(defined) if agent.tools is None else agent.tools
    for index, name in enumerate(agent.tools or ()):
        if name in wanted[:index]:
            found.append(
                Problem(file, lines.line(("tools", index)), f"tools[{index}]: {name!r} is listed twice")
            )
        elif name not in defined:
            known = ", ".join(defined) or "none"
            msg = f"tools[{index}]: {name!r} is not defined in tools.py (it defines: {known})"
            found.append(Problem(file, lines.line(("tools", index)), msg))
    have = set(wanted)
    for name in agent.tool_timeouts or {}:
        if name not in have:
            known = ", ".join(wanted) or "none"
            msg = f"tool_timeouts.{name}: {name!r} is not a tool of this agent (its tools: {known})"
            found.append(Problem(file, lines.line(("tool_timeouts", name)), msg))
    file, lines = rules_file
    for index, rule in enumerate((rules.rules or []) if rules else []):
        at = lines.line(("rules", index, "tool"))
        if rule.tool == ASK_USER:
            msg = f"{ASK_USER} is not gated: the model's questions always go to the user"
            found.append(Problem(file, at, f"rules[{index}].tool: {msg}"))
        elif rule.tool != "*" and rule.tool not in have:
            known = ", ".join(wanted) or "none"
            msg = (
                f"rules[{index}].tool: {rule.tool!r} is not a tool of this agent (its tools: {known}; or '*')"
            )
            found.append(Problem(file, at, msg))
    return [n for n in wanted if n in defined], found
