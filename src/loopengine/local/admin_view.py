"""What ``loopengine admin`` prints: tables for people, JSON for scripts, and its argument parsing.

Times are UTC (``2026-05-01 10:02:03Z``); a table cell longer than :data:`CELL` characters is cut
with ``…`` (``--json`` prints everything whole).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.turns import StopReason, TurnRecord, TurnStatus

if TYPE_CHECKING:
    from loopengine.app.engine import Engine
    from loopengine.app.operator import Action, TurnDetail
    from loopengine.app.request.items import ItemView
    from loopengine.local.admin_dlq import DeadLetter

CELL = 60
WIDE = 160
"""The audit's detail column: wider, the rest of the line."""
STATUSES = tuple(s.value for s in TurnStatus)
STOP_REASONS = tuple(r.value for r in StopReason)


class BadArgument(ValueError):
    """An argument the command cannot use (exit status 2)."""


def since(text: str, now: float) -> float:
    """``--since``: a duration ago (``90s``, ``30m``, ``2h``, ``7d``) or an ISO 8601 date or time (UTC)."""
    from loopengine.domain.base.errors import ConfigError
    from loopengine.domain.policy import parse_duration

    try:
        return now - parse_duration(text.strip(), "--since")
    except ConfigError:
        pass
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadArgument(
            f"--since {text!r}: give a duration (2h, 30m, 7d) or a date/time (ISO 8601)"
        ) from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def when(at: float | None) -> str:
    """A time as UTC text (empty for none)."""
    if not at:
        return ""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def ago(seconds: float) -> str:
    """``125`` -> ``2m``: the largest whole unit."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(int(seconds), 0)}s"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], last: int = CELL) -> str:
    """Columns padded to their widest cell; cells cut at :data:`CELL` characters (the last at ``last``)."""
    cells = [
        [_cell(c, last if i == len(header) - 1 else CELL) for i, c in enumerate(row)]
        for row in [header, *rows]
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines) + "\n"


def _cell(value: Any, width: int = CELL) -> str:
    text = value if isinstance(value, str) else "" if value is None else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def due(turn: TurnRecord, now: float) -> str:
    """When the sweep looks at the turn next: ``due 3m ago`` (overdue), ``in 40s``, or nothing."""
    if turn.due_at is None:
        return ""
    late = now - turn.due_at
    return f"due {ago(late)} ago" if late >= 0 else f"in {ago(-late)}"


def stop_of(turn: TurnRecord) -> str:
    """The stop reason a paused or finished turn has (a running turn keeps its last pause's: not shown)."""
    resting = turn.status in (TurnStatus.PAUSED, TurnStatus.FINISHED)
    return turn.stop_reason.value if resting and turn.stop_reason else ""


def turns(found: Sequence[TurnRecord], now: float) -> str:
    """The ``turns`` table."""
    if not found:
        return "no turns match\n"
    header = ("TURN", "STATUS", "STOP", "AGENT", "TENANT", "CREATED", "DUE")
    rows = [
        (t.turn_id, t.status.value, stop_of(t), t.agent, t.tenant or '""', when(t.created_at), due(t, now))
        for t in found
    ]
    return table(header, rows)


def turn_json(turn: TurnRecord) -> JsonDict:
    """A turn as stored, plus its API status."""
    return {**turn.to_dict(), "publicStatus": turn.status.public()}


def _item_row(item: ItemView) -> tuple[Any, ...]:
    decision = item.fate.decision
    cp = item.checkpoint
    pending = cp.outstanding.get(item.pending_id) if cp is not None else None
    tool = item.tool.name if item.tool else (decision.tool if decision else pending.tool if pending else "")
    expires = when(pending.expires_at) if pending is not None and pending.expires_at else ""
    by = decision.decided_by if decision else ""
    at = when(decision.at) if decision else expires and f"expires {expires}"
    return (item.pending_id, tool, item.fate.state.value, by, at)


def detail(d: TurnDetail) -> str:
    """The ``show`` page: the turn, its items, its calls, its audit."""
    t = d.turn
    facts = [
        ("turn", t.turn_id),
        ("agent", t.agent),
        ("tenant", t.tenant or '"" (default)'),
        ("session", t.session_id),
        ("status", f"{t.status.value} (API: {t.status.public()})"),
        ("stop reason", stop_of(t)),
        ("created", when(t.created_at)),
        ("updated", when(t.updated_at)),
        ("due", when(t.due_at)),
        ("lease until", when(t.lease_until) if t.runner else ""),
        ("model failures", str(t.model_failures) if t.model_failures else ""),
        ("stop requested", t.stop_requested or ""),
        ("code version", t.code_version or ""),
    ]
    text = "".join(f"{name + ':':16}{value}\n" for name, value in facts if value)
    text += "\nitems\n" + (
        table(("PENDING", "TOOL", "FATE", "BY", "AT"), [_item_row(i) for i in d.items])
        if d.items
        else "  none\n"
    )
    calls = [
        (c.record.tool_use_id, c.record.tool, c.outcome, when(c.record.started_at), c.idempotency_key)
        for c in d.calls
    ]
    text += "\ncalls\n" + (
        table(("CALL", "TOOL", "OUTCOME", "STARTED", "IDEMPOTENCY KEY"), calls) if calls else "  none\n"
    )
    for c in d.calls:
        tool = f"{c.record.tool} ({c.record.tool_use_id})"
        if c.outcome == "unknown":
            text += f"  ! {tool} is unknown: it may have run. Ask its provider about idempotency key "
            text += f"{c.idempotency_key} before doing it again.\n"
        elif c.outcome == "started":
            text += (
                f"  ! {tool} has no outcome yet: running, or its runner died (then it is reported unknown).\n"
            )
    audit = [(when(e.get("at")), e.get("type"), _rest(e)) for e in d.audit]
    return text + "\naudit\n" + table(("AT", "EVENT", "DETAIL"), audit, last=WIDE)


def _rest(event: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={_cell(v)}" for k, v in event.items() if k not in ("type", "at") and v is not None)


def detail_json(d: TurnDetail) -> JsonDict:
    """The ``show`` document."""
    items = []
    for item in d.items:
        pending_id, tool, fate, _by, _at = _item_row(item)
        decision = item.fate.decision.to_dict() if item.fate.decision else None
        items.append({"pendingId": pending_id, "tool": tool, "fate": fate, "decision": decision})
    calls = [{**c.record.to_dict(), "idempotencyKey": c.idempotency_key} for c in d.calls]
    return {"turn": turn_json(d.turn), "items": items, "calls": calls, "audit": d.audit}


def action_json(a: Action) -> JsonDict:
    """One action's outcome."""
    after = a.after
    return {
        "turnId": a.turn_id or None,
        "done": a.done,
        "note": a.note,
        "statusBefore": a.before.value if a.before else None,
        "status": after.status.value if after else None,
        "stopReason": stop_of(after) or None if after else None,
    }


def actions(done: Sequence[Action]) -> str:
    """The table of what each action did."""
    rows = []
    for a in done:
        after = a.after
        now = f"{after.status.value} {stop_of(after)}".strip() if after else ""
        rows.append(
            (a.turn_id, "done" if a.done else "not done", a.note, a.before.value if a.before else "", now)
        )
    return table(("TURN", "RESULT", "NOTE", "BEFORE", "NOW"), rows)


def status_of(engine: Engine, turn_id: str) -> str:
    """A turn's status for the dead-letter list (``gone`` when this store has no such turn)."""
    turn = engine.rt.stores.turns.get_turn(turn_id)
    if turn is None:
        return "gone"
    return f"{turn.status.value} {stop_of(turn)}".strip()


def letter_row(letter: DeadLetter, statuses: Mapping[str, str]) -> JsonDict:
    """One dead-lettered invocation."""
    return {
        "messageId": letter.message_id,
        "turnId": letter.turn_id,
        "turnStatus": statuses.get(letter.turn_id or "", "not a resume"),
        "failedAt": when(letter.sent_at),
        "condition": letter.condition,
        "attempts": letter.attempts,
        "requestId": letter.request_id,
        "error": letter.error,
        "payload": letter.payload if letter.turn_id is None else None,
    }


def letters(rows: Sequence[JsonDict]) -> str:
    """The ``dlq list`` table."""
    if not rows:
        return "the queue is empty\n"
    keys = ("messageId", "turnId", "turnStatus", "failedAt", "condition", "attempts", "error")
    header = ("MESSAGE", "TURN", "TURN NOW", "FAILED AT", "CONDITION", "TRIES", "ERROR")
    return table(header, [[row.get(k) for k in keys] for row in rows])
