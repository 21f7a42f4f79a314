"""What the AWS channels (``email``, ``sns``, ``queue``) share.

* the boto3 client: created on first use (never at import, so tests under moto and routes that
  never notify pay nothing for it), one per notifier, with the standard retry mode and short
  timeouts (:class:`AwsNotifier`); credentials come from the function's role, never the config;
* AWS errors as :class:`~loopengine.domain.base.errors.DeliveryError` raised from the original
  (:func:`aws_errors`, :func:`describe_error`);
* the message: the webhook's JSON body, a one-line subject, the ``event`` / ``agent`` message
  attributes, and on a FIFO target ``MessageGroupId`` = the turn and ``MessageDeduplicationId`` =
  the SHA-256 of the body (:class:`MessageNotifier`, the SNS and SQS sender);
* the config: no inline secrets, no unknown keys (:func:`check_keys`), ``region``.
"""

from __future__ import annotations

import hashlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self

from loopengine.app.ports import Notification
from loopengine.channels.base import notification_body, setting
from loopengine.domain.base.clock import Clock
from loopengine.domain.base.errors import ConfigError, DeliveryError

MAX_MESSAGE_BYTES = 262_144
"""SNS and SQS refuse bigger messages."""
EVENTS = ("approval", "question", "run_start", "run_finish")
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


def required_setting(
    config: Mapping[str, Any], env: Mapping[str, str], channel: str, name: str, default_env: str
) -> str:
    """:func:`~loopengine.channels.base.setting`, or ConfigError naming what is missing."""
    value = setting(config, env, name, default_env)
    if not value:
        named = config.get(f"{name}_env") or default_env
        raise ConfigError(f"notifier {channel}: needs {name} (or {name}_env; {named} is not set)")
    return value


def target_config(
    config: Mapping[str, Any], env: Mapping[str, str], channel: str, name: str, default_env: str
) -> tuple[str, str | None]:
    """``{name | name_env (default default_env), region?}``: the target and the region, if given."""
    check_keys(config, channel, {name, f"{name}_env", "region"})
    target = required_setting(config, env, channel, name, default_env)
    region = config.get("region")
    if region is not None and (not isinstance(region, str) or not region.strip()):
        raise ConfigError(f"notifier {channel}: region must be a region name like us-east-1")
    return target, region.strip() if region else None


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


class AwsNotifier:
    """A notifier with one boto3 client of ``service``, created on first use."""

    service: ClassVar[Literal["ses", "sns", "sqs"]]
    """The boto3 service name."""

    def __init__(self, *, region: str | None, client: Any) -> None:
        """Use ``client``, or build one in ``region`` (boto3's default when None) on first use."""
        self._region = region
        self._client = client
        self._lock = threading.Lock()

    def client(self) -> Any:
        """The boto3 client, created on first use."""
        with self._lock:
            if self._client is None:
                import boto3

                self._client = boto3.client(self.service, region_name=self._region, config=client_config())
            return self._client


class MessageNotifier(AwsNotifier, ABC):
    """Sends each notification as one message: the SNS and SQS channels.

    A subclass names its ``channel``, the client ``method``, its ``verb`` (for error messages) and
    its ``setting`` (the config key of its target, and that key's default environment variable);
    it reads a target in :meth:`parse` and builds the request's target and body fields in
    :meth:`request`.
    """

    channel: ClassVar[str]
    method: ClassVar[str]
    verb: ClassVar[str]
    setting: ClassVar[tuple[str, str]]

    def __init__(self, target: str, *, region: str | None = None, client: Any = None) -> None:
        """Send to ``target`` (in the region it names, unless ``region`` says otherwise).

        The queue or topic is FIFO when its name ends in ``.fifo``. ``client`` replaces the boto3
        client (built on first send otherwise). Raises
        :class:`~loopengine.domain.base.errors.ConfigError` for a target :meth:`parse` refuses.
        """
        name, named_region = self.parse(target)
        super().__init__(region=region or named_region, client=client)
        self.target = target
        self.name = name
        self.fifo = name.endswith(".fifo")

    @classmethod
    def from_config(cls, config: dict[str, Any], env: Mapping[str, str], clock: Clock) -> Self:
        """``{<setting> | <setting>_env (default its environment variable), region?}``."""
        key, default_env = cls.setting
        target, region = target_config(config, env, cls.channel, key, default_env)
        return cls(target, region=region)

    def __repr__(self) -> str:
        """Show the target."""
        return f"{type(self).__name__}({self.target!r})"

    @staticmethod
    @abstractmethod
    def parse(target: str) -> tuple[str, str | None]:
        """The queue's or topic's name and the region ``target`` names; ConfigError when it is not one."""

    @abstractmethod
    def request(self, notification: Notification, body: str) -> dict[str, Any]:
        """The request fields other than the attributes and FIFO ids."""

    def send(self, notification: Notification) -> str:
        """Send; return ``"<channel> <name>"``. Raises DeliveryError when AWS refuses it."""
        target = f"{self.channel} {self.name}"
        body = checked_body(notification, target)
        request = self.request(notification, body)
        request["MessageAttributes"] = attributes(notification)
        if self.fifo:
            request["MessageGroupId"] = group_id(notification)
            request["MessageDeduplicationId"] = dedup_id(body)
        errors = aws_errors()
        try:
            getattr(self.client(), self.method)(**request)
        except errors as exc:
            raise DeliveryError(f"{target}: {self.verb} failed: {describe_error(exc)}") from exc
        return target
