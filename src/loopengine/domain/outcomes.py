"""What the model is told about each tool call: one tool_result per tool_use, worded honestly.

``unknown`` is an answer: a call that was started but whose outcome nobody recorded is reported as
unknown, never as success or failure, and never re-run.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from loopengine.domain.messages import ToolResultBlock


class Outcome(StrEnum):
    """How a tool call ended."""

    OK = "ok"
    ERROR = "error"
    DENIED = "denied"
    SKIPPED = "skipped"
    UNKNOWN = "unknown"
    ANSWERED = "answered"


def _block(tool_use_id: str, body: dict[str, Any], is_error: bool) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id, json.dumps(body, sort_keys=True), is_error)


def denied(tool_use_id: str, reason: str, comment: str | None = None) -> ToolResultBlock:
    """A human or a rule said no; the comment, if any, is the reason the model sees."""
    body: dict[str, Any] = {"status": "denied", "reason": reason}
    if comment:
        body["comment"] = comment
    return _block(tool_use_id, body, True)


def skipped(tool_use_id: str) -> ToolResultBlock:
    """A sibling in the batch was denied, so this call was cancelled before it ran."""
    body = {
        "status": "skipped",
        "reason": "not run: another call in the same batch was denied, so the batch was cancelled",
    }
    return _block(tool_use_id, body, True)


def unknown(tool_use_id: str, why: str) -> ToolResultBlock:
    """Nobody can vouch for what happened; say so instead of guessing."""
    body = {
        "status": "unknown",
        "reason": why,
        "advice": "do not assume it succeeded or failed; tell the user and ask them to check",
    }
    return _block(tool_use_id, body, True)


CRASHED = (
    "this call was started but its outcome was never recorded (the process stopped mid-call); "
    "it was not retried"
)


def cancelled(tool_use_id: str, stop: str) -> ToolResultBlock:
    """The turn was stopped (cancelled or superseded) before this call started: it did not run."""
    why = "the user moved on with a new message" if stop == "superseded" else "the turn was cancelled"
    return _block(tool_use_id, {"status": "not_run", "reason": f"{why} before this call started"}, True)


def failed(tool_use_id: str, error: str) -> ToolResultBlock:
    """The tool ran and raised."""
    return _block(tool_use_id, {"status": "error", "error": error}, True)


def answered(tool_use_id: str, answer: str) -> ToolResultBlock:
    """The user's answer to ``system_ask_user``, verbatim."""
    return ToolResultBlock(tool_use_id, answer)


def edited(tool_use_id: str, content: str, args: dict[str, Any]) -> ToolResultBlock:
    """A result of a call a reviewer edited before approving: the model is told what ran."""
    notice = {"reviewer_edited_args": args, "result": _maybe_json(content)}
    return ToolResultBlock(tool_use_id, json.dumps(notice, sort_keys=True))


def _maybe_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
