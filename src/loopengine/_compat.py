"""Old import paths, kept for one release with a :class:`DeprecationWarning`.

Before 0.2 every module sat directly in ``loopengine/`` (``loopengine.tools``, ``loopengine.notify.webhook``,
...). Agent code written against those paths keeps working: a finder on ``sys.meta_path`` answers an old
name with the module at its new home (the same module object, so ``isinstance`` checks agree) and warns
once. New code imports from the package root (``from loopengine import Tool``) or the new paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

MOVED: dict[str, str] = {
    "turns": "domain.turns",
    "turn_state": "domain.turn_state",
    "checkpoint": "domain.checkpoint",
    "gate": "domain.gate",
    "rules_schema": "domain.rules",
    "policy": "domain.policy",
    "outcomes": "domain.outcomes",
    "messages": "domain.messages",
    "principals": "domain.principals",
    "errors": "domain.errors",
    "ids": "domain.ids",
    "clock": "domain.clock",
    "jsonsafe": "domain.jsonsafe",
    "schema": "domain.schema",
    "yaml_lines": "domain.yaml_lines",
    "outbox": "domain.outbox",
    "engine": "app.engine",
    "loop": "app.loop",
    "batch": "app.batch",
    "resolution": "app.resolution",
    "lifecycle": "app.lifecycle",
    "delivery": "app.delivery",
    "runtime": "app.runtime",
    "ports": "app.ports",
    "invokers": "app.invokers",
    "turn_events": "app.turn_events",
    "views": "app.views",
    "faults": "app.faults",
    "api_models": "app.api_models",
    "agent": "authoring.agent",
    "agent_code": "authoring.agent_code",
    "agent_loader": "authoring.agent_loader",
    "agent_schema": "authoring.agent_schema",
    "registry": "authoring.registry",
    "scaffold": "authoring.scaffold",
    "scaffold_templates": "authoring.scaffold_templates",
    "tools": "authoring.tools",
    "notify.channels": "channels.base",
    "notify.http": "channels.http",
    "notify.signing": "channels.signing",
    "notify.aws_common": "channels.aws",
    "notify.webhook": "channels.webhook.send",
    "notify.receiver": "channels.webhook.verify",
    "notify.email": "channels.email.send",
    "magic": "channels.magic.token",
    "magic_form": "channels.magic.form",
    "magic_pages": "channels.magic.pages",
    "slack": "channels.slack.interact",
    "notify.slack_post": "channels.slack.send",
    "notify.slack_reply": "channels.slack.reply",
    "notify.lark": "channels.lark.send",
    "notify.sns": "channels.sns.send",
    "notify.sqs": "channels.queue.send",
    "http.magic": "http.routes_magic",
    "http.slack": "http.routes_slack",
    "dev": "local.dev",
    "dev_http": "local.dev_http",
    "dev_guard": "local.dev_guard",
    "dev_stream": "local.dev_stream",
    "chat": "local.chat",
    "demo": "local.demo",
    "cli": "local.cli",
    "agents_cli": "local.agents_cli",
}
# packages that no longer exist but whose children moved: an empty package answers their name
GONE_PACKAGES = {"notify"}
PREFIX = "loopengine."


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str | None) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if self.target is None:
            module = types.ModuleType(spec.name)
            module.__path__ = []
            return module
        warnings.warn(
            f"{spec.name} moved to {self.target}; import it from there (or from loopengine)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.target)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class OldPaths(importlib.abc.MetaPathFinder):
    """Answers ``loopengine.<old name>`` with the module at its new home."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(PREFIX):
            return None
        old = fullname[len(PREFIX) :]
        if old in GONE_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, _Alias(None), is_package=True)
        if old in MOVED:
            return importlib.machinery.ModuleSpec(fullname, _Alias(PREFIX + MOVED[old]))
        return None


def install() -> None:
    """Put the finder last on ``sys.meta_path`` (real modules always win); idempotent."""
    if not any(isinstance(f, OldPaths) for f in sys.meta_path):
        sys.meta_path.append(OldPaths())
