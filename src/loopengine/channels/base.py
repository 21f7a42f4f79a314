"""Notifier channels: build the one a notifier target (an entry of agent.yaml's ``notifiers:``) names.

    notifiers:
      - channel: webhook          # a key of CHANNELS
        config: {...}             # per channel; secrets are named by env var (``*_env``), never inline
        events: [approval, question, run_start, run_finish]
        tools: [issue_refund]     # optional: the tools whose approvals (and questions) it takes

:data:`CHANNELS` is the one list of channels (kept in
:mod:`loopengine.authoring.channel_registry`, below this layer, so agent.yaml's schema checks
against it too): a new channel is its folder here plus one line there. Each channel lives in its
own module and is imported only when an agent uses it, so a deployment pays (at cold start) only
for the SDKs of the channels it has. ``database`` pushes nothing: the pending list
(``GET /pending-approvals``) is the poll surface.

The helpers below are what every channel may use: settings and secrets from the config and the
environment, the JSON body, payload fields as text. The AWS channels share
:mod:`loopengine.channels.aws`, the HTTP ones :mod:`loopengine.channels.http`.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loopengine.app.ports import Notification, Notifier
from loopengine.authoring.channel_registry import CHANNELS as CHANNELS  # re-exported: the one list
from loopengine.domain.base.clock import Clock
from loopengine.domain.base.errors import ConfigError, DeliveryError

Builder = Callable[[dict[str, Any], Mapping[str, str], Clock], Notifier | None]


def build(block: Mapping[str, Any], env: Mapping[str, str], clock: Clock) -> Notifier | None:
    """The notifier for one target's block (``None`` for ``database``)."""
    channel = block.get("channel")
    if not isinstance(channel, str) or channel not in CHANNELS:
        raise ConfigError(f"notifier channel {channel!r} is not one of {', '.join(CHANNELS)}")
    target = CHANNELS[channel]
    if target is None:
        return None
    config = block.get("config") or {}
    if not isinstance(config, dict):
        raise ConfigError(f"notifier {channel}: 'config' must be a mapping")
    module, _, name = target.partition(":")
    builder: Builder = getattr(importlib.import_module(module), name)
    return builder(config, env, clock)


def setting(config: Mapping[str, Any], env: Mapping[str, str], name: str, default_env: str = "") -> str:
    """``config[name]``, else the env var named by ``config[name + "_env"]`` (or ``default_env``)."""
    value = config.get(name)
    if isinstance(value, str) and value.strip():
        return value.strip()
    env_name = config.get(f"{name}_env") or default_env
    return env.get(env_name, "").strip() if env_name else ""


def secret(config: Mapping[str, Any], env: Mapping[str, str], name: str, channel: str) -> str:
    """A secret, only ever from the env var ``config[name + "_env"]`` names (never inline)."""
    if name in config:
        raise ConfigError(f"notifier {channel}: put {name} in the environment and name it with {name}_env")
    env_name = config.get(f"{name}_env")
    value = env.get(env_name, "") if isinstance(env_name, str) else ""
    if not value:
        raise ConfigError(f"notifier {channel}: {name}_env must name a set environment variable")
    return value


def notification_body(notification: Notification) -> str:
    """The JSON document the webhook, sns and queue channels send: ``{"event": ..., **payload}``.

    Compact, event first; ``notification.event`` wins over an ``event`` key in the payload.
    Raises :class:`~loopengine.domain.base.errors.DeliveryError` for a payload that is not JSON.
    """
    document: dict[str, Any] = {"event": notification.event}
    document.update((k, v) for k, v in notification.payload.items() if k != "event")
    try:
        return json.dumps(document, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise DeliveryError(
            f"{notification.event} notification payload is not JSON-serialisable: {exc}"
        ) from exc


def text_of(value: Any) -> str:
    """A payload field as text: ``""`` for missing, a string as it is, anything else as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def clip(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters (the last an ellipsis) when it is longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


BUTTON_PENDING_ID = re.compile(r"[A-Za-z0-9_\-]{1,128}")
"""A pendingId a chat button's value carries (Slack's, Lark's)."""


def check_button(
    kind: str, verb: str, verbs: Sequence[str], pending_id: str, extra: bool, mismatch: str
) -> None:
    """What a chat button's value must be (Slack's, Lark's); ValueError says what it is not.

    ``verb`` (what the button asks for, named ``kind`` in the error) one of ``verbs``, ``pending_id``
    a :data:`BUTTON_PENDING_ID`, and an ``extra`` (an answer, an option) exactly when ``verb`` is
    ``"answer"`` (``mismatch`` otherwise).
    """
    if verb not in verbs:
        raise ValueError(f"{kind} must be one of {tuple(verbs)}")
    if not BUTTON_PENDING_ID.fullmatch(pending_id):
        raise ValueError("pending_id must be 1-128 letters, digits, '_' or '-'")
    if (verb == "answer") != extra:
        raise ValueError(mismatch)


NOT_AN_APPROVER = "You are not among the approvers"
"""What a chat button's clicker who may not decide its item is told (Slack's, Lark's)."""
