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

The client, the body, the attributes, the FIFO ids and the errors are
:mod:`loopengine.channels.aws`'s: the boto3 client is created on first send, with the
standard retry mode; AWS errors become :class:`~loopengine.domain.base.errors.DeliveryError` raised from the
original.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from loopengine.app.ports import Notification
from loopengine.channels.aws import MessageNotifier
from loopengine.domain.base.errors import ConfigError

ENV_QUEUE_URL = "LOOPENGINE_SQS_QUEUE_URL"
_REGION_HOST = re.compile(r"^(?:sqs\.([a-z0-9-]+)|([a-z0-9-]+)\.queue)\.amazonaws\.com(?:\.cn)?$")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}(?:\.fifo)?$")


class QueueNotifier(MessageNotifier):
    """Sends notifications to one SQS queue (a ``Notifier``)."""

    service = "sqs"
    channel = "queue"
    method = "send_message"
    verb = "send"
    setting = ("queue_url", ENV_QUEUE_URL)

    @staticmethod
    def parse(target: str) -> tuple[str, str | None]:
        """An SQS queue URL's queue name, and the region its host names (if it does)."""
        parts = urlsplit(target)
        segments = [s for s in parts.path.split("/") if s]
        if parts.scheme not in ("http", "https") or not parts.hostname or len(segments) != 2:
            raise ConfigError(
                f"notifier queue: {target!r} is not an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)"
            )
        if not _QUEUE_NAME.match(segments[1]):
            raise ConfigError(f"notifier queue: {segments[1]!r} is not an SQS queue name")
        host = _REGION_HOST.match(parts.hostname)
        return segments[1], (host and (host.group(1) or host.group(2))) or None

    def request(self, notification: Notification, body: str) -> dict[str, Any]:
        """``SendMessage``'s queue and body."""
        return {"QueueUrl": self.target, "MessageBody": body}


from_config = QueueNotifier.from_config
