"""Sending what the outbox holds: right after the write that recorded it, then by the sweep.

See :mod:`loopengine.domain.outbox` for the record and its states. A failure is recorded (the record's
``lastError`` and a ``notification_failed`` audit event), never raised: a notifier must never lose
the turn.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from loopengine.app import faults
from loopengine.app.ports import Notification
from loopengine.app.runtime import Runtime
from loopengine.authoring.agent import AgentConfig
from loopengine.domain import outbox
from loopengine.domain.ids import new_id
from loopengine.domain.notifications import NotificationEvent
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.turns import TurnRecord

JsonDict = dict[str, Any]


def announce(
    rt: Runtime, config: AgentConfig, turn: TurnRecord, note: NotificationEvent
) -> tuple[OutboxRecord, ...]:
    """The outbox record for ``note`` (none when the agent's notifier does not want it)."""
    event = note.event
    wanted = (config.notifier or {}).get("events")
    if wanted is not None and event not in wanted:
        return ()
    try:
        if rt.notifier_for(config) is None:
            return ()
    except Exception:  # a misconfigured channel: record it; delivery will record why it fails
        pass
    now = rt.stores.clock.now()
    record = outbox.new_record(
        new_id("evt_"), turn.turn_id, turn.agent, turn.config_hash, event, note.payload(), now
    )
    return (record,)


def hold(records: tuple[OutboxRecord, ...], until: float | None) -> tuple[OutboxRecord, ...]:
    """``records`` due at ``until`` (the live window's end): the writer does not send them, the sweep does.

    ``None`` leaves them as they are (sent right after the write).
    """
    if until is None:
        return records
    return tuple(replace(r, due_at=until, held=True) for r in records)


def deliver(rt: Runtime, records: Iterable[OutboxRecord], drop_decided: bool = False) -> None:
    """Try to send each record once; store its new state (delivered, due again, or given up).

    With ``drop_decided`` (the sweep), a held ``approval`` / ``question`` notification (see
    :func:`hold`) whose item is no longer open (decided inline during the live window) is not
    sent: it is stored as ``dropped`` and recorded (``notification_dropped``). Every other
    notification is sent at least once, whatever happened to its item since.
    """
    for record in records:
        now = rt.stores.clock.now()
        if drop_decided and _decided(rt, record):
            _store(rt, outbox.dropped(record))
            rt.event(
                record.turn_id,
                "notification_dropped",
                notification=record.event,
                eventId=record.event_id,
                pendingId=record.payload.get("pendingId"),
                reason="the item was decided before the notification went out",
            )
            continue
        try:
            config = rt.config_by_hash(record.agent, record.config_hash)
            notifier = rt.notifier_for(config)
            faults.point("notify")
            if notifier is None:
                where = "nowhere (no notifier configured)"
            else:
                where = notifier.send(Notification(record.event, record.payload))
        except Exception as exc:  # recorded, retried by the sweep with backoff
            after = outbox.attempt_failed(record, now, f"{type(exc).__name__}: {exc}")
            _store(rt, after)
            detail = {"notification": record.event, "eventId": record.event_id, "error": str(exc)}
            rt.event(record.turn_id, "notification_failed", attempts=after.attempts, **detail)
            if after.state == "failed":
                rt.event(record.turn_id, "notification_gave_up", **detail)
            continue
        _store(rt, outbox.delivered(record))
        rt.event(
            record.turn_id, "notified", notification=record.event, eventId=record.event_id, channel=where
        )


def deliver_due(rt: Runtime, limit: int = 100) -> int:
    """The sweep's part: send every notification that is due; returns how many were tried."""
    due = rt.stores.turns.due_outbox(rt.stores.clock.now(), limit)
    deliver(rt, due, drop_decided=True)
    return len(due)


def _decided(rt: Runtime, record: OutboxRecord) -> bool:
    """Whether ``record`` announces a pending item that is no longer open."""
    pending_id = record.payload.get("pendingId")
    if not record.held or record.event not in ("approval", "question") or not isinstance(pending_id, str):
        return False
    try:
        cp = rt.stores.checkpoints.find_by_pending(pending_id)
    except Exception:  # cannot tell: send it (at least once)
        return False
    return cp is None or cp.closed or pending_id not in cp.outstanding


def _store(rt: Runtime, record: OutboxRecord) -> None:
    try:
        rt.stores.turns.put_outbox(record)
    except Exception:  # the record stays due: the sweep sends it again (at least once)
        return
