"""``agent.yaml`` as a strict model, and the checks that span an agent's files.

Every key is listed here (and in docs/agents.md); anything else is an error with its line.
:func:`cross_check` ties agent.yaml, rules.yaml and tools.py together: the tools agent.yaml names
exist in tools.py, every rule names a tool the agent has, and so does every notifier target's
``tools`` (:func:`target_problems`). Channel names come from the one registry,
:mod:`loopengine.authoring.channel_registry`; event names from :mod:`loopengine.domain.notifications`.
"""

# No `from __future__ import annotations`: pydantic would compile each string annotation of the
# models below in every cold start (docs/performance.md "Cold start").
from collections.abc import Callable, Collection, Sequence
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, model_validator

from loopengine.authoring.channel_registry import CHANNELS as CHANNELS  # re-exported: the one list
from loopengine.authoring.context import MAX_TOOL_TIMEOUT
from loopengine.authoring.mcp import McpServerModel, covered, mcp_names, mcp_problems
from loopengine.authoring.tools import ASK_USER
from loopengine.domain.base.yaml_lines import Lines, Problem
from loopengine.domain.notifications import EVENTS as EVENTS  # re-exported
from loopengine.domain.rules import (
    Duration,
    JsonValue,
    NonEmpty,
    OnExpiry,
    RulesFile,
    Strict,
    expiry_needs_ttl,
    location,
)

AGENT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"
"""Route names: letters, digits, ``-`` and ``_``, up to 63 characters."""
TOOL_EVENTS = ("approval", "question")
"""The events a target's ``tools:`` filters (a question is the ``system_ask_user`` call)."""


def _one_of(names: Collection[str]) -> Callable[[str], str]:
    """A validator admitting only ``names`` (worded as a ``Literal``'s), suggesting the closest one."""
    quoted = [repr(n) for n in names]
    expected = f"{', '.join(quoted[:-1])} or {quoted[-1]}"

    def check(value: str) -> str:
        if value not in names:
            import difflib  # only for a "did you mean" in an error: not at a cold start

            close = difflib.get_close_matches(value, list(names), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"must be {expected}, not {value!r}{hint}")
        return value

    return check


Channel = Annotated[str, AfterValidator(_one_of(CHANNELS))]
"""A key of :data:`~loopengine.authoring.channel_registry.CHANNELS` (the one list of channels)."""
Event = Annotated[str, AfterValidator(_one_of(EVENTS))]
Positive = Annotated[int, Field(gt=0)]


class NotifierModel(Strict):
    """One notifier target: a channel, its config, the events it takes and the tools it covers.

    ``notifiers:`` is a list of these (``notifier:``, one of them, stays accepted). ``events``
    default: all four; ``tools`` (default: every tool) filters ``approval`` and ``question`` only, a
    question counting as a ``system_ask_user`` call.
    """

    channel: Channel
    config: dict[str, JsonValue] | None = None
    events: Annotated[list[Event], Field(min_length=1)] | None = None
    tools: Annotated[list[NonEmpty], Field(min_length=1)] | None = None


class ModelRetryModel(Strict):
    """``model_retry:`` how a turn waits out transient model errors (after the SDK's own retries)."""

    attempts: Annotated[int, Field(ge=1, le=20)] = 5
    first_wait: Duration = 30.0
    max_wait: Duration = 600.0

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.first_wait <= 0 or self.max_wait < self.first_wait:
            raise ValueError("model_retry: first_wait must be > 0 and max_wait at least first_wait")
        return self


class PromptCacheModel(Strict):
    """``prompt_cache:`` whether model calls mark prompt-cache breakpoints, and for how long entries live."""

    enabled: bool = True
    ttl: Literal["5m", "1h"] = "5m"


class ContextModel(Strict):
    """``context:`` how a long session stays within the model's window (docs/agents.md)."""

    window_tokens: Annotated[int, Field(ge=1_000, le=10_000_000)] = 200_000
    compact_at: Annotated[float, Field(gt=0.1, le=0.95)] = 0.8
    strategy: Literal["summarize", "trim"] = "summarize"


class AgentFile(Strict):
    """``agent.yaml``."""

    name: Annotated[str, Field(pattern=AGENT_NAME)]
    model: NonEmpty
    system: NonEmpty
    tools: list[NonEmpty] | None = None
    max_tokens: Positive = 1024
    max_iterations: Positive = 10
    notifier: NotifierModel | None = None
    notifiers: Annotated[list[NotifierModel], Field(min_length=1)] | None = None
    on_new_message: Literal["supersede", "reject", "queue"] = "supersede"
    pending_ttl: Duration | None = None
    on_expiry: OnExpiry | None = None
    live_wait: Duration | None = None
    tool_timeouts: dict[str, Duration] | None = None
    mcp_servers: list[McpServerModel] | None = None
    model_retry: ModelRetryModel | None = None
    prompt_cache: PromptCacheModel | None = None
    provider: Literal["anthropic", "bedrock"] | None = None
    context: ContextModel | None = None

    _expiry_needs_ttl = model_validator(mode="after")(expiry_needs_ttl)

    @model_validator(mode="after")
    def _window_holds_an_answer(self) -> Self:
        if self.context is not None and self.context.window_tokens < 4 * self.max_tokens:
            raise ValueError(
                f"context.window_tokens ({self.context.window_tokens}) must be at least 4 times max_tokens "
                f"({self.max_tokens}): the window holds the conversation and the answer"
            )
        return self

    @model_validator(mode="after")
    def _timeouts_fit_a_worker(self) -> Self:
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
    mcp = agent.mcp_servers or []
    found += [
        Problem(file, lines.line(loc), f"{location(loc)}: {msg}") for loc, msg in mcp_problems(mcp, wanted)
    ]
    for name in agent.tool_timeouts or {}:
        if name not in have and covered(mcp, name):
            msg = f"tool_timeouts.{name}: an MCP tool's time limit is its server's timeout (mcp_servers)"
            found.append(Problem(file, lines.line(("tool_timeouts", name)), msg))
        elif name not in have:
            known = ", ".join(wanted) or "none"
            msg = f"tool_timeouts.{name}: {name!r} is not a tool of this agent (its tools: {known})"
            found.append(Problem(file, lines.line(("tool_timeouts", name)), msg))
    file, lines = rules_file
    for index, rule in enumerate((rules.rules or []) if rules else []):
        at = lines.line(("rules", index, "tool"))
        if rule.tool == ASK_USER:
            msg = f"{ASK_USER} is not gated: the model's questions always go to the user"
            found.append(Problem(file, at, f"rules[{index}].tool: {msg}"))
        elif rule.tool != "*" and rule.tool not in have and not covered(mcp, rule.tool):
            known = ", ".join([*wanted, *mcp_names(mcp)]) or "none"
            msg = (
                f"rules[{index}].tool: {rule.tool!r} is not a tool of this agent (its tools: {known}; or '*')"
            )
            found.append(Problem(file, at, msg))
    found += target_problems(agent, agent_file, wanted)
    return [n for n in wanted if n in defined], found


def target_problems(
    agent: AgentFile, agent_file: tuple[str, Lines], tools: Sequence[str] | None
) -> list[Problem]:
    """What is wrong with agent.yaml's notifier targets beyond their shape (``tools``: the agent's, if known).

    Both ``notifier`` and ``notifiers``; a target's ``tools`` that the agent does not have (or lists
    twice), or that filter nothing because the target takes neither ``approval`` nor ``question``.
    """
    file, lines = agent_file
    found: list[Problem] = []
    mcp = agent.mcp_servers or []
    if agent.notifier is not None and agent.notifiers is not None:
        msg = (
            f"notifiers: give either notifier (one target, line {lines.line(('notifier',))}) or notifiers "
            "(a list of targets), not both"
        )
        found.append(Problem(file, lines.line(("notifiers",)), msg))
    targets: list[tuple[tuple[str | int, ...], str, NotifierModel]] = []
    if agent.notifier is not None:
        targets.append((("notifier",), "notifier", agent.notifier))
    targets += [(("notifiers", i), f"notifiers[{i}]", t) for i, t in enumerate(agent.notifiers or ())]
    for loc, where, target in targets:
        if target.tools and target.events and not set(target.events) & set(TOOL_EVENTS):
            msg = f"{where}.tools: filters only approval and question, and this target takes neither"
            found.append(Problem(file, lines.line((*loc, "tools")), msg))
        for index, name in enumerate(target.tools or ()):
            at = lines.line((*loc, "tools", index))
            if name in (target.tools or [])[:index]:
                found.append(Problem(file, at, f"{where}.tools[{index}]: {name!r} is listed twice"))
            elif tools is not None and name != ASK_USER and name not in tools and not covered(mcp, name):
                known = ", ".join(tools) or "none"
                msg = (
                    f"{where}.tools[{index}]: {name!r} is not a tool of this agent (its tools: {known}; "
                    f"or {ASK_USER} for its questions)"
                )
                found.append(Problem(file, at, msg))
    return found
