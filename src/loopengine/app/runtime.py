"""What the loop needs from the outside world, bundled once per process by a composition root."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from loopengine.app.ports import Change, Committed, ModelClient, Notifier, ResumeInvoker, Stores
from loopengine.app.usage import settle
from loopengine.authoring.agent import AgentConfig, from_snapshot
from loopengine.authoring.mcp import McpConnector
from loopengine.authoring.tools import ToolFn
from loopengine.domain.base.errors import Conflict, NotFound, VersionConflict
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.turns import TurnRecord

MAX_CAS_ATTEMPTS = 50
Decide = Callable[[TurnRecord, TurnCheckpoint | None], Change | None]


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
    """Stores, agents, model, notifier and resume invoker for one process.

    ``lease_seconds``: how long a runner's claim on a turn lasts between heartbeats (a dead
    runner's turn is picked up by the sweep after at most this plus the sweep interval);
    ``handoff_grace``: how long a turn made ready (or handed off) may stay unclaimed before the
    sweep invokes it again; ``model_retry_seconds``: the first durable wait after a transient
    model error (doubling, up to ``max_model_failures`` in a row, then the turn ends ``error``).
    """

    stores: Stores
    agents: AgentSource
    model_for: Callable[[AgentConfig], ModelClient]
    notifier_for: Callable[[AgentConfig], Notifier | None]
    """The notifier of a config naming one target: delivery passes ``config.for_target(target)``."""
    invoker: ResumeInvoker
    public_url: str = ""
    lease_seconds: float = 60.0
    handoff_grace: float = 60.0
    model_retry_seconds: float = 30.0
    max_model_failures: int = 5
    sweep_batch: int = 20
    """Due turns one sweep pass moves on at most (LOOPENGINE_SWEEP_BATCH; app/worker/sweep.py): the
    rest stay due for the next pass, so a pass never starts more resumes than about twice the resume
    function's reserved concurrency (10 in template.yaml; 8 local workers under ``loopengine dev``)."""
    max_waits: int = 8
    """Long-polls one principal may hold at once (LOOPENGINE_MAX_WAITS; see app/request/waits.py)."""
    tenant_daily_tokens: int | None = None
    """A tenant's tokens per UTC day (LOOPENGINE_TENANT_DAILY_TOKENS, app/usage.py); None: no limit."""
    observer: Callable[[str, JsonDict], None] | None = None
    code_version: str | None = None
    mcp: McpConnector | None = None
    """The MCP client pinned MCP tools call through (None: they answer that none is configured)."""
    _configs: dict[tuple[str, str], AgentConfig] = field(default_factory=dict, repr=False)

    def config_of(self, turn: TurnRecord) -> AgentConfig:
        """The config snapshot the turn started under, with today's tool code.

        Snapshots are immutable (stored under their content hash), so each is read once per process.
        """
        return self.config_by_hash(turn.agent, turn.config_hash)

    def config_by_hash(self, agent: str, config_hash: str) -> AgentConfig:
        """The config snapshot ``config_hash`` of ``agent``, with today's tool code."""
        key = (agent, config_hash)
        if key not in self._configs:
            snapshot = self.stores.turns.get_config(config_hash)
            if snapshot is None:
                raise NotFound(f"config snapshot {config_hash} of agent {agent!r} is missing")
            self._configs[key] = from_snapshot(snapshot, self.agents.code(agent), self.mcp)
        return self._configs[key]

    def knows_config(self, agent: str, config_hash: str) -> bool:
        """Whether this process holds that config (it need not be read)."""
        return (agent, config_hash) in self._configs

    def remember_config(self, agent: str, config_hash: str, snapshot: JsonDict) -> None:
        """Keep a config snapshot read or written elsewhere (its store write rides in a change)."""
        if (agent, config_hash) not in self._configs:
            self._configs[(agent, config_hash)] = from_snapshot(snapshot, self.agents.code(agent), self.mcp)

    def keep_config(self, agent: str, config_hash: str, snapshot: JsonDict) -> None:
        """Store a turn's config snapshot (once per process) and keep it, so the turn need not read it."""
        key = (agent, config_hash)
        if key not in self._configs:
            self.stores.turns.put_config(config_hash, snapshot)
            self._configs[key] = from_snapshot(snapshot, self.agents.code(agent), self.mcp)

    def transition(
        self,
        turn_id: str,
        decide: Decide,
        *,
        turn: TurnRecord | None = None,
        checkpoint: TurnCheckpoint | str | None = None,
    ) -> Committed | None:
        """The one compare-and-set helper: apply ``decide`` to the latest records atomically.

        ``decide(turn, checkpoint)`` (pure; it may run more than once) returns the
        :class:`~loopengine.app.ports.Change` to write, or ``None`` to decline (then the result is
        ``None``). A lost race brings the stored record of whichever side conflicted and
        ``decide`` runs again on it; a session append that lost (the history moved: ``current`` is its
        length) is raised as VersionConflict at once, for the caller to re-plan from the new history.
        ``checkpoint`` is the one ``decide`` reads (``None``: none): a record or its id to read.
        ``turn`` and a checkpoint record are what the caller already holds: the first attempt
        writes on them without reading (a stale one just costs the conflict).
        Events of a landed change are passed to the observer.
        """
        cp = checkpoint if isinstance(checkpoint, TurnCheckpoint) else None
        checkpoint_id = checkpoint.id if isinstance(checkpoint, TurnCheckpoint) else checkpoint
        for _ in range(MAX_CAS_ATTEMPTS):
            if turn is None:
                turn = self.stores.turns.get_turn(turn_id)
                if turn is None:
                    raise NotFound(f"no turn {turn_id!r}")
            if checkpoint_id is not None and cp is None:
                cp = self.stores.checkpoints.get(checkpoint_id)
            change = decide(turn, cp)
            if change is None:
                return None
            change = settle(change, self.stores.clock.now())  # a pause or finish counts the turn's usage
            try:
                done = self.stores.turns.commit(change)
            except VersionConflict as conflict:
                if isinstance(conflict.current, int):  # the session moved: the append itself is stale,
                    raise  # so retrying it cannot succeed; the caller re-plans from the history
                if isinstance(conflict.current, TurnCheckpoint):
                    cp = conflict.current
                elif isinstance(conflict.current, TurnRecord):
                    turn = conflict.current
                else:
                    turn, cp = None, None
                continue
            self.observed(change, done)
            return done
        raise Conflict(f"turn {turn_id} is too contended; try again")

    def observed(self, change: Change, done: Committed) -> None:
        """Tell the observer (if any) the events of a change that landed, with its turn's agent and tenant."""
        if self.observer is not None:
            owner = _owner(change, done)
            for event in change.events:
                self.observer(str(event["type"]), {"turnId": change.turn_id, **owner, **event})

    def stamp(self, kind: str, **data: Any) -> JsonDict:
        """An audit event stamped with the clock, to ride in a :class:`~loopengine.app.ports.Change`."""
        return {"type": kind, "at": self.stores.clock.now(), **data}

    def update_turn(
        self,
        turn_id: str,
        fn: Callable[[TurnRecord], TurnRecord | None],
        current: TurnRecord | None = None,
        *events: JsonDict,
    ) -> TurnRecord | None:
        """Apply ``fn`` (pure) to the turn alone through :meth:`transition`; ``events`` ride along."""

        def decide(turn: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
            changed = fn(turn)
            return None if changed is None else Change(turn_id, turn=changed, events=events)

        done = self.transition(turn_id, decide, turn=current)
        return done.turn if done is not None else None

    def event(self, turn_id: str, kind: str, *, for_agent: str | None = None, **data: Any) -> None:
        """Append an audit event stamped with the clock (and tell the observer, if any).

        ``for_agent``: the turn's agent, passed to the observer beside the event (not stored).
        """
        record = {"type": kind, "at": self.stores.clock.now(), **data}
        self.stores.turns.add_event(turn_id, record)
        if self.observer is not None:
            owner = {"agent": for_agent} if for_agent else {}
            self.observer(kind, {"turnId": turn_id, **owner, **record})


def _owner(change: Change, done: Committed) -> JsonDict:
    """The agent and tenant of a landed change's turn (for the observer), from what it wrote."""
    turn = done.turn or change.turn or change.new_turn
    if turn is not None:
        return {"agent": turn.agent, "tenant": turn.tenant}
    cp = done.checkpoint or change.checkpoint or change.new_checkpoint
    return {"agent": cp.agent, "tenant": cp.tenant} if cp is not None else {}
