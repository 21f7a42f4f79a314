"""The resume function's dead-letter queue, read and re-driven for ``loopengine admin dlq``.

An asynchronous invoke of the resume (or schedule) function that failed past Lambda's retries is
sent to the stack's ``FailureQueue`` (SQS) as an *invocation record*, a JSON document::

    {"version": "1.0", "timestamp": "...",
     "requestContext": {"requestId", "functionArn", "condition": "RetriesExhausted",
                        "approximateInvokeCount": 3},
     "requestPayload": {"turnId": "trn_..."},
     "responseContext": {"statusCode", "executedVersion", "functionError": "Unhandled"},
     "responsePayload": {"errorMessage", "errorType", ...}}

(a queue set as a function's ``DeadLetterConfig`` gets the bare event instead, ``{"turnId": ...}``,
with the error in the message attributes ``RequestID`` / ``ErrorCode`` / ``ErrorMessage``; both are
read). :class:`DeadLetterQueue` lists them without consuming them (each message received is made
visible again at once) and takes them for a re-drive (hidden while it runs, deleted once handled).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from loopengine.domain.base.errors import ConfigError, StoreError
from loopengine.domain.base.jsontypes import JsonDict

PAGE = 10
"""Messages one ReceiveMessage returns at most (SQS's own limit)."""
TAKE_SECONDS = 300
"""How long a message taken for a re-drive stays hidden from other readers before it is handled."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One failed asynchronous invocation, as the queue holds it."""

    message_id: str
    receipt: str
    turn_id: str | None
    function: str | None = None
    request_id: str | None = None
    condition: str | None = None
    attempts: int | None = None
    error: str | None = None
    sent_at: float | None = None
    payload: JsonDict | None = None

    def note(self) -> JsonDict:
        """What the turn's audit records about this message."""
        fields = {"messageId": self.message_id, "requestId": self.request_id, "error": self.error}
        return {"deadLetter": {k: v for k, v in fields.items() if v is not None}}


def parse(message: dict[str, Any]) -> DeadLetter:
    """A received SQS message as a :class:`DeadLetter` (``turn_id`` None: not a resume's event)."""
    try:
        body = json.loads(message.get("Body") or "")
    except ValueError:
        body = None
    body = body if isinstance(body, dict) else {}
    record = "requestPayload" in body
    payload = body.get("requestPayload") if record else body
    payload = payload if isinstance(payload, dict) else None
    found = body.get("requestContext") if record else None
    context: dict[str, Any] = found if isinstance(found, dict) else {}
    attributes = {k: v.get("StringValue") for k, v in (message.get("MessageAttributes") or {}).items()}
    turn_id = payload.get("turnId") if payload is not None else None
    sent = (message.get("Attributes") or {}).get("SentTimestamp")
    count = context.get("approximateInvokeCount")
    return DeadLetter(
        message_id=str(message.get("MessageId", "")),
        receipt=str(message.get("ReceiptHandle", "")),
        turn_id=turn_id if isinstance(turn_id, str) and turn_id else None,
        function=_text(context.get("functionArn")),
        request_id=_text(context.get("requestId")) or attributes.get("RequestID"),
        condition=_text(context.get("condition")) or attributes.get("ErrorCode"),
        attempts=count if isinstance(count, int) else None,
        error=_error(body) if record else attributes.get("ErrorMessage"),
        sent_at=int(sent) / 1000 if isinstance(sent, str) and sent.isdigit() else None,
        payload=payload,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _error(body: JsonDict) -> str | None:
    response = body.get("responsePayload")
    if isinstance(response, dict) and isinstance(response.get("errorMessage"), str):
        return str(response["errorMessage"])[:500]
    context = body.get("responseContext")
    return _text(context.get("functionError")) if isinstance(context, dict) else None


class DeadLetterQueue:
    """The SQS queue at ``url`` (the stack's ``FailureQueueUrl`` output)."""

    def __init__(self, url: str, client: Any = None) -> None:
        if not url:
            raise ConfigError(
                "name the dead-letter queue: --queue-url or LOOPENGINE_DLQ_URL "
                "(the stack's FailureQueueUrl output)"
            )
        self.url = url
        self._client = client

    def _sqs(self) -> Any:
        if self._client is None:
            import boto3

            found = re.match(r"https?://sqs\.([a-z0-9-]+)\.", self.url)
            self._client = boto3.client("sqs", region_name=found.group(1) if found else None)
        return self._client

    def _call(self, operation: str, **params: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._sqs(), operation)(QueueUrl=self.url, **params)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            raise StoreError(f"SQS {operation} on {self.url} failed: {code or exc}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"SQS {operation} on {self.url} failed: {exc}") from exc

    def visible(self) -> int:
        """How many messages the queue holds for readers now (SQS's approximate count)."""
        found = self._call("get_queue_attributes", AttributeNames=["ApproximateNumberOfMessages"])
        return int(found.get("Attributes", {}).get("ApproximateNumberOfMessages", 0))

    def _receive(self, limit: int, hide_for: int) -> list[DeadLetter]:
        """Up to ``limit`` messages, each hidden for ``hide_for`` seconds.

        It stops at an empty poll, or once it has as many as the queue said it held (a count SQS
        keeps approximately: a message it missed is there for the next run).
        """
        found: dict[str, DeadLetter] = {}
        limit = min(limit, self.visible())
        while len(found) < limit:
            page = self._call(
                "receive_message",
                MaxNumberOfMessages=min(PAGE, limit - len(found)),
                VisibilityTimeout=hide_for,
                WaitTimeSeconds=1,  # asks every SQS server, not a sample: an empty answer means empty
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            messages = page.get("Messages") or []
            if not messages:
                break
            for message in messages:
                letter = parse(message)
                found.setdefault(letter.message_id, letter)
        return list(found.values())

    def peek(self, limit: int = 100) -> list[DeadLetter]:
        """The messages, left in the queue and visible again (as far as SQS allows: a moment hidden)."""
        letters = self._receive(limit, 30)
        for letter in letters:
            self.release(letter)
        return letters

    def take(self, limit: int = 100) -> list[DeadLetter]:
        """Messages to handle now: hidden for :data:`TAKE_SECONDS`; :meth:`delete` or :meth:`release` each."""
        return self._receive(limit, TAKE_SECONDS)

    def delete(self, letter: DeadLetter) -> None:
        """Remove a handled message."""
        self._call("delete_message", ReceiptHandle=letter.receipt)

    def release(self, letter: DeadLetter) -> None:
        """Make a message visible again at once (left for later)."""
        self._call("change_message_visibility", ReceiptHandle=letter.receipt, VisibilityTimeout=0)
