"""A test harness: an Engine over real SQLite stores, a fake clock, a scripted model.

Tests build agents in code (``agent(...)``) with tools whose calls they can count, script the
model with ``ScriptedModel.from_list`` (stateless: it picks a response by the number of assistant
messages, so resumes in "another process" continue the script), and read what was notified.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopengine.app.engine import Engine
from loopengine.app.invokers import InlineInvoker, RecordingInvoker
from loopengine.app.ports import ModelClient, Notification, ResumeInvoker
from loopengine.app.runtime import Runtime
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.tools import Tool, ToolFn
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import NotFound
from loopengine.domain.gate import RuleSet
from loopengine.stores.sqlite import open_sqlite_stores

ECHO_SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "note": {"type": "string"}},
    "required": ["x"],
    "additionalProperties": False,
}


@dataclass
class Calls:
    """Counts every execution of every tool (what "nothing runs twice" is checked against)."""

    log: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def tool(self, name: str, schema: dict[str, Any] | None = None, fn: ToolFn | None = None) -> Tool:
        """A tool that records each execution and returns ``{"tool": name, "args": args}``."""

        def run(args: dict[str, Any]) -> Any:
            self.log.append((name, args))
            return fn(args) if fn else {"tool": name, "args": args}

        return Tool(name, f"test tool {name}", schema or ECHO_SCHEMA, run)

    def count(self, name: str) -> int:
        """How many times ``name`` ran."""
        return sum(1 for n, _ in self.log if n == name)


def agent(name: str, tools: list[Tool], rules: dict[str, Any], **kw: Any) -> AgentConfig:
    """An AgentConfig built in code."""
    return AgentConfig(
        name=name, model="test-model", system="test", tools=tuple(tools), rules=RuleSet.from_dict(rules), **kw
    )


class StaticAgents:
    """An AgentSource over configs built in code."""

    def __init__(self, *configs: AgentConfig) -> None:
        self.configs = {c.name: c for c in configs}

    def get(self, name: str) -> AgentConfig:
        """The config named ``name``."""
        if name not in self.configs:
            raise NotFound(f"no agent named {name!r}")
        return self.configs[name]

    def code(self, name: str) -> dict[str, ToolFn]:
        """Tool code by name."""
        return {t.name: t.execute for t in self.get(name).tools}


class RecordingNotifier:
    """Keeps every notification; ``fail=True`` makes every delivery raise."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[Notification] = []
        self.fail = fail

    def send(self, notification: Notification) -> str:
        """Record (or fail)."""
        if self.fail:
            raise RuntimeError("receiver down")
        self.sent.append(notification)
        return "recording"

    def events(self, name: str) -> list[dict[str, Any]]:
        """Payloads of the notifications of one event type."""
        return [n.payload for n in self.sent if n.event == name]


@dataclass
class Harness:
    """Everything a scenario test touches."""

    engine: Engine
    clock: FakeClock
    notifier: RecordingNotifier
    invoker: ResumeInvoker
    agents: StaticAgents

    @property
    def rt(self) -> Runtime:
        """The runtime under test."""
        return self.engine.rt

    def deliver_resumes(self) -> None:
        """Deliver the resumes a recording invoker holds (as Lambda's async invoke would), in order."""
        invoked = getattr(self.invoker, "invoked", None)
        while invoked:
            self.engine.resume(invoked.pop(0))


def make_harness(
    db: Path,
    *configs: AgentConfig,
    model: ModelClient,
    inline: bool = True,
    fail_notify: bool = False,
) -> Harness:
    """An Engine on SQLite at ``db``; ``inline=False`` records resumes instead of running them."""
    clock = FakeClock()
    stores = open_sqlite_stores(str(db), clock)
    agents = StaticAgents(*configs)
    notifier = RecordingNotifier(fail=fail_notify)
    invoker: Any = InlineInvoker() if inline else RecordingInvoker()
    rt = Runtime(
        stores=stores,
        agents=agents,
        model_for=lambda _c: model,
        notifier_for=lambda _c: notifier,
        invoker=invoker,
        public_url="http://test.invalid",
    )
    engine = Engine(rt)
    if inline:
        invoker.resume = engine.resume
    return Harness(engine, clock, notifier, invoker, agents)


Build = Callable[..., Harness]
"""``build(*configs, model=..., inline=True)``: the ``install_harness`` fixture (tests/conftest.py)."""


def reports_unknown(content: str) -> bool:
    """Whether a tool_result's content reports the call ``unknown`` (outcomes.unknown's JSON, or text)."""
    try:
        parsed = json.loads(content)
    except ValueError:
        return "unknown" in content
    return isinstance(parsed, dict) and parsed.get("status") == "unknown"


class LambdaAsync:
    """Lambda's async invoke: queued, delivered later, a delivery that fails (raises ``fails``)
    retried twice, as Lambda retries an asynchronous event."""

    def __init__(self, fails: type[BaseException] = Exception) -> None:
        self.fails = fails
        self.queue: list[tuple[str, int]] = []
        self.redelivered = 0

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        self.queue.append((turn_id, 0))

    def deliver(self, engine: Engine) -> None:
        while self.queue:
            turn_id, attempt = self.queue.pop(0)
            try:
                engine.resume(turn_id)
            except self.fails:
                if attempt < 2:
                    self.redelivered += 1
                    self.queue.append((turn_id, attempt + 1))
