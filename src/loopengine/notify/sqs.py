"""The ``queue`` channel: send each notification to an SQS queue.

    notifier:
      channel: queue
      config:
        queue_url_env: LOOPENGINE_SQS_QUEUE_URL   # the default; or queue_url: https://sqs...
      events: [approval, question, run_finish]

The message body is the webhook's JSON body (``{"event": ..., **payload}``, compact) and carries the
message attributes ``event`` and ``agent``. A FIFO queue (URL ending in ``.fifo``) gets
``MessageGroupId`` = the turn, so a turn's notifications arrive in order, and
``MessageDeduplicationId`` = the SHA-256 of the body.

The boto3 client is created on first send, with the standard retry mode; AWS errors become
:class:`~loopengine.errors.DeliveryError` raised from the original.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from loopengine.clock import Clock
from loopengine.errors import ConfigError, DeliveryError
from loopengine.notify.sns import (
    attributes,
    aws_errors,
    check_keys,
    checked_body,
    client_config,
    dedup_id,
    describe_error,
    group_id,
)
from loopengine.ports import Notification

ENV_QUEUE_URL = "LOOPENGINE_SQS_QUEUE_URL"
_REGION_HOST = re.compile(r"^(?:sqs\.([a-z0-9-]+)|([a-z0-9-]+)\.queue)\.amazonaws\.com(?:\.cn)?$")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}(?:\.fifo)?$")


class QueueNotifier:
    """Sends notifications to one SQS queue (a ``Notifier``)."""

    def __init__(self, queue_url: str, *, region: str | None = None, client: Any = None) -> None:
        """Target ``queue_url`` (in the region its host names, unless ``region`` says otherwise).

        ``client`` replaces the boto3 SQS client (built on first send otherwise). Raises
        :class:`~loopengine.errors.ConfigError` for something that is not a queue URL.
        """
        parts = urlsplit(queue_url)
        segments = [s for s in parts.path.split("/") if s]
        if parts.scheme not in ("http", "https") or not parts.hostname or len(segments) != 2:
            raise ConfigError(
                f"notifier queue: {queue_url!r} is not an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)"
            )
        if not _QUEUE_NAME.match(segments[1]):
            raise ConfigError(f"notifier queue: {segments[1]!r} is not an SQS queue name")
        host = _REGION_HOST.match(parts.hostname)
        self.queue_url = queue_url
        self.name = segments[1]
        self.fifo = self.name.endswith(".fifo")
        self._region = region or (host and (host.group(1) or host.group(2))) or None
        self._client = client
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        """Show the queue."""
        return f"QueueNotifier({self.queue_url!r})"

    def client(self) -> Any:
        """The SQS client, created on first use."""
        with self._lock:
            if self._client is None:
                import boto3

                self._client = boto3.client("sqs", region_name=self._region, config=client_config())
            return self._client

    def send(self, notification: Notification) -> str:
        """Send; return ``"queue <queue name>"``. Raises DeliveryError when SQS refuses it."""
        target = f"queue {self.name}"
        body = checked_body(notification, target)
        request: dict[str, Any] = {
            "QueueUrl": self.queue_url,
            "MessageBody": body,
            "MessageAttributes": attributes(notification),
        }
        if self.fifo:
            request["MessageGroupId"] = group_id(notification)
            request["MessageDeduplicationId"] = dedup_id(body)
        errors = aws_errors()
        try:
            self.client().send_message(**request)
        except errors as exc:
            raise DeliveryError(f"{target}: send failed: {describe_error(exc)}") from exc
        return target


def from_config(config: dict[str, Any], env: Mapping[str, str], clock: Clock) -> QueueNotifier:
    """``{queue_url | queue_url_env (default LOOPENGINE_SQS_QUEUE_URL), region?}``."""
    from loopengine.notify.channels import setting

    check_keys(config, "queue", {"queue_url", "queue_url_env", "region"})
    url = setting(config, env, "queue_url", ENV_QUEUE_URL)
    if not url:
        named = config.get("queue_url_env") or ENV_QUEUE_URL
        raise ConfigError(f"notifier queue: needs queue_url (or queue_url_env; {named} is not set)")
    region = config.get("region")
    if region is not None and (not isinstance(region, str) or not region.strip()):
        raise ConfigError("notifier queue: region must be a region name like us-east-1")
    return QueueNotifier(url, region=region.strip() if region else None)
