"""A turn's event stream: its audit events numbered, read after a sequence number, long-polled.

The audit trail is append-only and read back in the order it was written, so an event's place in
it is stable: ``seq`` is its 1-based index. A client keeps the last ``seq`` it saw and asks for
what came after it (``GET /turns/{turnId}/events?after=<seq>&wait=<s>``); ``loopengine dev``
streams the same events as Server-Sent Events.

What a live client sees, in order: ``started`` / ``resumed``, ``text:delta`` (the model's text as
it streams, coalesced: at most one per 0.25 s of a call, see :mod:`loopengine.app.live`),
``model_response`` (with the model's whole ``text``), ``tool_outcome``, ``paused`` followed by
one ``approval:pending`` or ``question:pending`` per item (``pendingId``, ``tool``, ``args``,
``argsHash``, ``reason``, a question's ``question`` / ``options``, and ``liveUntil`` when the
message came on the live channel), ``decided`` (who, through which channel), ``notified`` /
``notification_dropped``, and ``finished`` with ``stopReason`` and ``text``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import PendingItem

FIRST_POLL_SECONDS = 0.05
MAX_POLL_SECONDS = 0.5
FINISHED = "finished"


def pending_events(items: Sequence[PendingItem], live_until: float | None) -> list[tuple[str, JsonDict]]:
    """The ``approval:pending`` / ``question:pending`` events of a pause, one per item."""
    out = []
    for item in items:
        data: JsonDict = {
            "pendingId": item.pending_id,
            "kind": item.kind,
            "tool": item.tool,
            "args": item.args,
            "argsHash": item.args_hash,
            "reason": item.reason,
        }
        if item.kind == "question":
            data["question"] = item.args.get("question")
            data["options"] = item.args.get("options")
        if item.approvers:
            data["approvers"] = list(item.approvers)
        if item.expires_at is not None:
            data["expiresAt"] = item.expires_at
        if live_until is not None:
            data["liveUntil"] = live_until
        out.append((f"{item.kind}:pending", data))
    return out


def numbered(events: Sequence[JsonDict], after: int) -> list[JsonDict]:
    """The events past ``after``, each with its ``seq`` (1-based place in the whole trail)."""
    return [{"seq": i, **event} for i, event in enumerate(events, start=1) if i > after]


def poll(
    read: Callable[[], Sequence[JsonDict]],
    after: int,
    wait: float,
    sleep: Callable[[float], object],
) -> tuple[list[JsonDict], int]:
    """Events after ``after`` and the ``next`` cursor, waiting up to ``wait`` seconds for one.

    Returns at once when there is something new; otherwise reads again with a growing pause
    (``sleep``, from 50 ms up to 0.5 s) until an event arrives or ``wait`` is used up.
    """
    step, waited = FIRST_POLL_SECONDS, 0.0
    while True:
        found = numbered(read(), after)
        if found or waited >= wait:
            return found, found[-1]["seq"] if found else after
        pause = min(step, wait - waited)
        sleep(pause)
        waited += pause
        step = min(step * 2, MAX_POLL_SECONDS)
