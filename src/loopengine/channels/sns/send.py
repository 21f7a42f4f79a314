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

The client, the body, the attributes, the FIFO ids and the errors are
:mod:`loopengine.channels.aws`'s: the boto3 client is created on first send with the standard
retry mode, AWS errors become :class:`~loopengine.domain.base.errors.DeliveryError` raised from the original,
and credentials come from the function's role, never from the config.
"""

from __future__ import annotations

import re
from typing import Any

from loopengine.app.ports import Notification
from loopengine.channels.aws import MessageNotifier, subject_line
from loopengine.domain.base.errors import ConfigError

ENV_TOPIC_ARN = "LOOPENGINE_SNS_TOPIC_ARN"
MAX_SUBJECT_CHARS = 100
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:([a-z0-9-]+):(\d{12}):([A-Za-z0-9_-]{1,256}(?:\.fifo)?)$")


def sns_subject(notification: Notification) -> str:
    """The subject line as SNS accepts it: printable ASCII, at most 100 characters."""
    text = subject_line(notification).encode("ascii", "replace").decode("ascii")
    text = "".join(ch if " " <= ch <= "~" else "?" for ch in text)
    if len(text) > MAX_SUBJECT_CHARS:
        text = text[: MAX_SUBJECT_CHARS - 3].rstrip() + "..."
    return text


class SnsNotifier(MessageNotifier):
    """Publishes notifications to one SNS topic (a ``Notifier``)."""

    service = "sns"
    channel = "sns"
    method = "publish"
    verb = "publish"
    setting = ("topic_arn", ENV_TOPIC_ARN)

    @staticmethod
    def parse(target: str) -> tuple[str, str | None]:
        """An SNS topic ARN's topic name and region."""
        match = _TOPIC_ARN.match(target)
        if match is None:
            raise ConfigError(
                f"notifier sns: {target!r} is not an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>)"
            )
        return match.group(3), match.group(1)

    def request(self, notification: Notification, body: str) -> dict[str, Any]:
        """``Publish``'s topic, message and subject."""
        return {"TopicArn": self.target, "Message": body, "Subject": sns_subject(notification)}


from_config = SnsNotifier.from_config
