"""An agent's notifier targets: where each notification goes, resolved from its pinned config.

agent.yaml names them in ``notifiers:`` (a list) or ``notifier:`` (one target, the older form); an
agent that names none has one target, the deployment default (``LOOPENGINE_DEFAULT_WEBHOOK_URL``,
if set). Each target is known by its place in its config's list, ``t0``, ``t1``, ...: an outbox
record names the config it was written under (its hash) and the target key, and a config snapshot
never changes, so the key always finds the same target, however the folder is edited later.

A target takes an event when its ``events`` (default: all) list it and, for ``approval`` and
``question`` only, its ``tools`` (default: all) list the call's tool; a question is the
``system_ask_user`` call. ``run_start`` / ``run_finish`` belong to no tool: ``tools`` never filters them.
"""

from __future__ import annotations

from dataclasses import dataclass

from loopengine.authoring.agent_schema import TOOL_EVENTS
from loopengine.domain.base.errors import ConfigError
from loopengine.domain.base.jsontypes import JsonDict

DEFAULT_KEY = "t0"
"""The key of an agent's first target (also: the deployment default, and a record without a key)."""


@dataclass(frozen=True, slots=True)
class NotifierTarget:
    """One place an agent's notifications go.

    ``block``: the target as agent.yaml wrote it (``channel``, ``config``, ``events``, ``tools``),
    ``{}`` for the deployment default; ``events`` / ``tools``: ``None`` for all.
    """

    key: str
    block: JsonDict
    events: frozenset[str] | None = None
    tools: frozenset[str] | None = None

    @property
    def channel(self) -> str:
        """The channel's name (``default`` for the deployment default webhook)."""
        return str(self.block.get("channel") or "default")

    def takes(self, event: str, tool: str | None) -> bool:
        """Whether this target wants ``event`` about ``tool`` (the call of an approval or question)."""
        if self.events is not None and event not in self.events:
            return False
        if self.tools is not None and event in TOOL_EVENTS:
            return tool in self.tools
        return True

    @staticmethod
    def of(key: str, block: JsonDict) -> NotifierTarget:
        """The target ``block`` (validated at load) as it sits at ``key``."""
        if not isinstance(block, dict):
            raise ConfigError(f"notifier target {key}: must be a mapping")
        return NotifierTarget(key, dict(block), _names(block, "events", key), _names(block, "tools", key))


def targets_of(notifier: JsonDict | None, notifiers: list[JsonDict] | None) -> tuple[NotifierTarget, ...]:
    """The targets of a config's ``notifier`` / ``notifiers`` blocks (the default when it has neither)."""
    if notifier is not None and notifiers is not None:
        raise ConfigError("give either notifier (one target) or notifiers (a list of targets), not both")
    if notifiers is not None:
        return tuple(NotifierTarget.of(f"t{index}", block) for index, block in enumerate(notifiers))
    return (NotifierTarget.of(DEFAULT_KEY, notifier or {}),)


def _names(block: JsonDict, field: str, key: str) -> frozenset[str] | None:
    value = block.get(field)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"notifier target {key}: {field} must be a list of names")
    return frozenset(value)
