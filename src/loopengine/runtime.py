"""What the loop needs from the outside world, bundled once per process by a composition root."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from loopengine.agent import AgentConfig, from_snapshot
from loopengine.errors import NotFound, VersionConflict
from loopengine.ports import ModelClient, Notification, Notifier, ResumeInvoker, Stores
from loopengine.tools import ToolFn
from loopengine.turns import TurnRecord

JsonDict = dict[str, Any]


class AgentSource(Protocol):
    """Where current agent configs and tool code come from (see ``registry.AgentRegistry``)."""

    def get(self, name: str) -> AgentConfig:
        """The current config of an agent."""
        ...

    def code(self, name: str) -> dict[str, ToolFn]:
        """Tool implementations by name."""
        ...


@dataclass
class Runtime:
    """Stores, agents, model, notifier and resume invoker for one process."""

    stores: Stores
    agents: AgentSource
    model_for: Callable[[AgentConfig], ModelClient]
    notifier_for: Callable[[AgentConfig], Notifier | None]
    invoker: ResumeInvoker
    public_url: str = ""
    lease_seconds: float = 900.0
    stale_call_seconds: float = 900.0
    observer: Callable[[str, JsonDict], None] | None = None
    code_version: str | None = None
    _configs: dict[tuple[str, str], AgentConfig] = field(default_factory=dict, repr=False)

    def config_of(self, turn: TurnRecord) -> AgentConfig:
        """The config snapshot the turn started under, with today's tool code.

        Snapshots are immutable (stored under their content hash), so each is read once per process.
        """
        key = (turn.agent, turn.config_hash)
        if key not in self._configs:
            snapshot = self.stores.turns.get_config(turn.config_hash)
            if snapshot is None:
                raise NotFound(f"config snapshot {turn.config_hash} of turn {turn.turn_id} is missing")
            self._configs[key] = from_snapshot(snapshot, self.agents.code(turn.agent))
        return self._configs[key]

    def update_turn(
        self,
        turn_id: str,
        fn: Callable[[TurnRecord], TurnRecord | None],
        current: TurnRecord | None = None,
    ) -> TurnRecord | None:
        """Apply ``fn`` to the latest turn record with compare-and-set, retrying on conflict.

        ``fn`` must be pure (it may run more than once); returning ``None`` declines the change,
        and then the result is ``None``. Writers that each change different fields (the loop's
        lease, a cancel request) therefore never undo each other. ``current`` is a record the
        caller already holds: the first attempt writes on it without reading (a stale one just
        costs the conflict, which brings the stored record).
        """
        if current is None:
            current = self.stores.turns.get_turn(turn_id)
        for _ in range(50):
            if current is None:
                raise NotFound(f"no turn {turn_id!r}")
            changed = fn(current)
            if changed is None:
                return None
            try:
                return self.stores.turns.replace_turn(changed)
            except VersionConflict as conflict:
                current = conflict.current
        raise VersionConflict(f"turn {turn_id} is too contended", current)

    def event(self, turn_id: str, kind: str, **data: Any) -> None:
        """Append an audit event stamped with the clock (and tell the observer, if any)."""
        record = {"type": kind, "at": self.stores.clock.now(), **data}
        self.stores.turns.add_event(turn_id, record)
        if self.observer is not None:
            self.observer(kind, {"turnId": turn_id, **record})

    def notify(self, config: AgentConfig, turn_id: str, event: str, payload: JsonDict) -> None:
        """Deliver one notification; a failure is recorded in the audit trail, never raised."""
        wanted = (config.notifier or {}).get("events")
        if wanted is not None and event not in wanted:
            return
        try:  # building the notifier can fail too (a misconfigured channel): same rule
            notifier = self.notifier_for(config)
            if notifier is None:
                return
            where = notifier.send(Notification(event, payload))
        except Exception as exc:  # a notifier must never lose the turn
            self.event(turn_id, "notification_failed", notification=event, error=str(exc))
            return
        self.event(turn_id, "notified", notification=event, channel=where)
