"""Sending what the outbox holds: right after the write that recorded it, then by the sweep.

See :mod:`loopengine.domain.outbox` for the record and its states. A notification gets one record per
target that takes it (:mod:`loopengine.authoring.targets`: the targets of the turn's pinned config,
each with its ``events`` and ``tools``), all with the notification's one ``eventId``; each record
is sent, retried and recorded on its own. A failure is recorded (the record's ``lastError`` and a
``notification_failed`` audit event naming the target), never raised: a notifier must never lose
the turn, and one target's failure (even its channel failing to build) is that record's alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from loopengine.app import faults
from loopengine.app.ports import Notification
from loopengine.app.runtime import Runtime
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.targets import DEFAULT_KEY, NotifierTarget
from loopengine.authoring.tools import ASK_USER
from loopengine.domain import outbox
from loopengine.domain.base.ids import new_id
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.notifications import ApprovalEvent, NotificationEvent, QuestionEvent
from loopengine.domain.outbox import OutboxRecord
from loopengine.domain.turns import TurnRecord


def announce(
    rt: Runtime, config: AgentConfig, turn: TurnRecord, note: NotificationEvent
) -> tuple[OutboxRecord, ...]:
    """The outbox records for ``note``: one per target of ``config`` (the turn's) that takes it.

    A target that pushes nothing (``database``, or the default when the deployment has none) gets
    no record; one whose channel fails to build does (its delivery records why it fails).
    """
    event_id, now, payload = new_id("evt_"), rt.stores.clock.now(), note.payload()
    return tuple(
        outbox.new_record(
            event_id, turn.turn_id, turn.agent, turn.config_hash, note.event, payload, now, target=key
        )
        for key in _wanting(rt, config, note)
    )


def _wanting(rt: Runtime, config: AgentConfig, note: NotificationEvent) -> list[str]:
    """The keys of the targets that take ``note`` and push it somewhere."""
    tool = note.tool if isinstance(note, ApprovalEvent) else None
    tool = ASK_USER if isinstance(note, QuestionEvent) else tool
    try:
        targets = config.targets()
    except Exception:  # unreadable targets (a config built in code): one record; delivery records why
        return [DEFAULT_KEY]
    return [t.key for t in targets if t.takes(note.event, tool) and _pushes(rt, config, t)]


def _pushes(rt: Runtime, config: AgentConfig, target: NotifierTarget) -> bool:
    try:
        return rt.notifier_for(config.for_target(target)) is not None
    except Exception:  # a misconfigured channel: record it; delivery will record why it fails
        return True


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

    Each record goes to its own target, looked up in the config it was written under; the audit
    events name it (``target``: ``t0``, ``t1``, ...).
    """
    for record in records:
        now = rt.stores.clock.now()
        tag = {
            "notification": record.event,
            "eventId": record.event_id,
            "target": record.target or DEFAULT_KEY,
        }
        if drop_decided and _decided(rt, record):
            _store(rt, outbox.dropped(record))
            rt.event(
                record.turn_id,
                "notification_dropped",
                **tag,
                pendingId=record.payload.get("pendingId"),
                reason="the item was decided before the notification went out",
            )
            continue
        channel = "unknown"  # until the target is found
        try:
            config = rt.config_by_hash(record.agent, record.config_hash)
            target = config.target(record.target)
            channel = target.channel
            notifier = rt.notifier_for(config.for_target(target))
            faults.point("notify")
            if notifier is None:
                where = "nowhere (no notifier configured)"
            else:
                where = notifier.send(Notification(record.event, record.payload))
        except Exception as exc:  # recorded, retried by the sweep with backoff
            after = outbox.attempt_failed(record, now, f"{type(exc).__name__}: {exc}")
            _store(rt, after)
            detail = {**tag, "channel": channel, "error": str(exc)}
            failed = {"attempts": after.attempts, **detail}
            rt.event(record.turn_id, "notification_failed", for_agent=record.agent, **failed)
            if after.state == "failed":
                rt.event(record.turn_id, "notification_gave_up", **detail)
            continue
        if record.attempts == 0:  # its first try: the state and its event in one write
            _store(rt, outbox.delivered(record), rt.stamp("notified", **tag, channel=where))
            continue
        _store(rt, outbox.delivered(record))
        rt.event(record.turn_id, "notified", **tag, channel=where)


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


def _store(rt: Runtime, record: OutboxRecord, event: JsonDict | None = None) -> None:
    """Store ``record``'s state (and ``event``, in the same write; the observer hears of it once landed)."""
    try:
        rt.stores.turns.put_outbox(record, () if event is None else (event,))
    except Exception:  # the record stays due: the sweep sends it again (at least once)
        return
    if event is not None and rt.observer is not None:
        rt.observer(str(event["type"]), {"turnId": record.turn_id, **event})
