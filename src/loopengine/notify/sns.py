"""The ``sns`` channel: publish each notification to an SNS topic.

    notifier:
      channel: sns
      config:
        topic_arn_env: LOOPENGINE_SNS_TOPIC_ARN   # the default; or topic_arn: arn:aws:sns:...
      events: [approval, question]

``Message`` is the webhook's JSON body (``{"event": ..., **payload}``, compact), so one consumer can
read either channel. ``Subject`` is a short ASCII line for email subscriptions; the message
attributes ``event`` and ``agent`` let subscriptions filter. A FIFO topic (``.fifo``) gets
``MessageGroupId`` = the turn and ``MessageDeduplicationId`` = the SHA-256 of the body.

The boto3 client is created on first send (never at import, so tests under moto and routes that
never notify pay nothing for it) with the standard retry mode. AWS errors become
:class:`~loopengine.errors.DeliveryError` raised from the original; credentials come from the
function's role, never from the config.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping
from typing import Any

from loopengine.clock import Clock
from loopengine.errors import ConfigError, DeliveryError
from loopengine.ports import Notification

ENV_TOPIC_ARN = "LOOPENGINE_SNS_TOPIC_ARN"
MAX_MESSAGE_BYTES = 262_144
"""SNS (and SQS) refuse bigger messages."""
MAX_SUBJECT_CHARS = 100
EVENTS = ("approval", "question", "run_start", "run_finish")
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:([a-z0-9-]+):(\d{12}):([A-Za-z0-9_-]{1,256}(?:\.fifo)?)$")
_SECRET_WORDS = ("secret", "password", "token", "credential", "access_key", "api_key")


def client_config() -> Any:
    """The botocore ``Config`` of every notifier client: standard retries, short timeouts."""
    from botocore.config import Config

    return Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=10)


def aws_errors() -> tuple[type[Exception], ...]:
    """The botocore exceptions a send turns into DeliveryError (imported on first use)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)


def describe_error(exc: Exception) -> str:
    """``Code: message`` for a ClientError, ``Type: message`` for anything else."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        code, message = error.get("Code"), error.get("Message")
        if code:
            return f"{code}: {message}" if message else str(code)
    return f"{type(exc).__name__}: {exc}"


def check_keys(config: Mapping[str, Any], channel: str, known: set[str]) -> None:
    """Refuse inline secrets (credentials come from the role or the environment) and unknown keys."""
    for key in config:
        lowered = key.lower()
        if not lowered.endswith("_env") and any(word in lowered for word in _SECRET_WORDS):
            raise ConfigError(
                f"notifier {channel}: {key!r} looks like a secret; secrets are never inline "
                "(they come from the environment; AWS credentials from the function's role)"
            )
        if key not in known:
            raise ConfigError(f"notifier {channel}: unknown config key {key!r} (known: {sorted(known)})")


def notification_body(notification: Notification) -> str:
    """The webhook's JSON document: ``{"event": ..., **payload}``, compact, event first."""
    document: dict[str, Any] = {"event": notification.event}
    document.update((k, v) for k, v in notification.payload.items() if k != "event")
    try:
        return json.dumps(document, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise DeliveryError(
            f"{notification.event} notification payload is not JSON-serialisable: {exc}"
        ) from exc


def checked_body(notification: Notification, target: str) -> str:
    """The JSON body, refused (DeliveryError) for an unknown event or when too big to send."""
    if notification.event not in EVENTS:
        raise DeliveryError(f"{target}: unknown notification event {notification.event!r}")
    body = notification_body(notification)
    size = len(body.encode("utf-8"))
    if size > MAX_MESSAGE_BYTES:
        raise DeliveryError(
            f"{target}: {notification.event} message is {size} bytes (limit {MAX_MESSAGE_BYTES})"
        )
    return body


def subject_line(notification: Notification) -> str:
    """A one-line summary: ``[loopengine] <agent> wants to <tool>`` and the like."""
    p = notification.payload
    agent = str(p.get("agent") or "agent")
    if notification.event == "approval":
        text = f"[loopengine] {agent} wants to {p.get('tool')}"
    elif notification.event == "question":
        text = f"[loopengine] {agent} asks: {p.get('question') or 'a question'}"
    elif notification.event == "run_start":
        text = f"[loopengine] {agent} started a run ({p.get('trigger') or 'message'})"
    else:
        text = f"[loopengine] {agent} finished a run ({p.get('stopReason')})"
    return " ".join(text.split())  # no line breaks or runs of whitespace


def sns_subject(notification: Notification) -> str:
    """:func:`subject_line` as SNS accepts it: printable ASCII, at most 100 characters."""
    text = subject_line(notification).encode("ascii", "replace").decode("ascii")
    text = "".join(ch if " " <= ch <= "~" else "?" for ch in text)
    if len(text) > MAX_SUBJECT_CHARS:
        text = text[: MAX_SUBJECT_CHARS - 3].rstrip() + "..."
    return text


def attributes(notification: Notification) -> dict[str, Any]:
    """``event`` (and ``agent``, when known) as String message attributes."""
    found = {"event": notification.event}
    agent = notification.payload.get("agent")
    if isinstance(agent, str) and agent:
        found["agent"] = agent
    return {k: {"DataType": "String", "StringValue": v} for k, v in found.items()}


def group_id(notification: Notification) -> str:
    """The FIFO message group: the turn (its notifications stay in order)."""
    turn = notification.payload.get("turnId")
    return turn if isinstance(turn, str) and turn else "loopengine"


def dedup_id(body: str) -> str:
    """The FIFO deduplication id: SHA-256 of the body (the same notification twice is sent once)."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


class SnsNotifier:
    """Publishes notifications to one SNS topic (a ``Notifier``)."""

    def __init__(self, topic_arn: str, *, region: str | None = None, client: Any = None) -> None:
        """Target ``topic_arn`` (its region unless ``region`` says otherwise).

        ``client`` replaces the boto3 SNS client (built on first send otherwise). Raises
        :class:`~loopengine.errors.ConfigError` for something that is not an SNS topic ARN.
        """
        match = _TOPIC_ARN.match(topic_arn)
        if match is None:
            raise ConfigError(
                f"notifier sns: {topic_arn!r} is not an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>)"
            )
        self.topic_arn = topic_arn
        self.name = match.group(3)
        self.fifo = self.name.endswith(".fifo")
        self._region = region or match.group(1)
        self._client = client
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        """Show the topic."""
        return f"SnsNotifier({self.topic_arn!r})"

    def client(self) -> Any:
        """The SNS client, created on first use."""
        with self._lock:
            if self._client is None:
                import boto3

                self._client = boto3.client("sns", region_name=self._region, config=client_config())
            return self._client

    def send(self, notification: Notification) -> str:
        """Publish; return ``"sns <topic name>"``. Raises DeliveryError when SNS refuses it."""
        target = f"sns {self.name}"
        body = checked_body(notification, target)
        request: dict[str, Any] = {
            "TopicArn": self.topic_arn,
            "Message": body,
            "Subject": sns_subject(notification),
            "MessageAttributes": attributes(notification),
        }
        if self.fifo:
            request["MessageGroupId"] = group_id(notification)
            request["MessageDeduplicationId"] = dedup_id(body)
        errors = aws_errors()
        try:
            self.client().publish(**request)
        except errors as exc:
            raise DeliveryError(f"{target}: publish failed: {describe_error(exc)}") from exc
        return target


def from_config(config: dict[str, Any], env: Mapping[str, str], clock: Clock) -> SnsNotifier:
    """``{topic_arn | topic_arn_env (default LOOPENGINE_SNS_TOPIC_ARN), region?}``."""
    from loopengine.notify.channels import setting

    check_keys(config, "sns", {"topic_arn", "topic_arn_env", "region"})
    arn = setting(config, env, "topic_arn", ENV_TOPIC_ARN)
    if not arn:
        named = config.get("topic_arn_env") or ENV_TOPIC_ARN
        raise ConfigError(f"notifier sns: needs topic_arn (or topic_arn_env; {named} is not set)")
    region = config.get("region")
    if region is not None and (not isinstance(region, str) or not region.strip()):
        raise ConfigError("notifier sns: region must be a region name like us-east-1")
    return SnsNotifier(arn, region=region.strip() if region else None)
