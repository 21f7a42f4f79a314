"""The notifier channels: the one list of them, and where each one's builder lives.

A new channel is one folder (``loopengine/channels/<name>/``, with a ``from_config(config, env, clock)``
builder) plus one line here. Everything else reads this table: agent.yaml's schema (which channel
names a ``notifiers:`` target may use), :func:`loopengine.channels.base.build` (which module to import,
only when an agent uses it) and the docs' channel tables (checked by the tests).

The builders are named as ``"module:function"`` text, so this table imports nothing: the schema can
check a name without loading any channel's SDK. ``None``: the channel pushes nothing (``database``:
``GET /pending-approvals`` is the poll surface).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

CHANNELS: Final[Mapping[str, str | None]] = MappingProxyType(
    {
        "webhook": "loopengine.channels.webhook.send:from_config",
        "email": "loopengine.channels.email.send:from_config",
        "sns": "loopengine.channels.sns.send:from_config",
        "queue": "loopengine.channels.queue.send:from_config",
        "slack": "loopengine.channels.slack.send:from_config",
        "lark": "loopengine.channels.lark.send:from_config",
        "redis": "loopengine.channels.redis.send:from_config",
        "database": None,
    }
)
"""Channel name -> ``"module:function"`` building its notifier (``None``: nothing to push)."""
