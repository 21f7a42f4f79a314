"""A bounded load run through a real ``loopengine dev`` on SQLite, optionally killed ``-9`` mid-run.

Each session is the customer-service story: message -> pause (issue_refund) -> approve -> resume ->
chained pause (send_email) -> approve -> finish. ``--clients`` threads drive ``--sessions`` of them;
with ``--kills K`` the whole server (every environment) is killed -9 K times while they run and
started again with short lease / grace / sweep settings. Clients ride out the outage: they retry,
and find their turn in the store if the answer was lost.

At the end it waits for the sweep, approves anything left parked, and checks every turn: at rest
(finished), no tool ran twice (a ledger the tools append to, against their claims), every tool_use
has exactly one tool_result (``check_protocol``), and counts ``unknown`` outcomes. The agent is
the shipped customer-service agent (its agent.yaml, rules, script and tools) under the name
``customer-service-load``, its tools wrapped to append each execution to the ledger.

Not a timed test: ``python bench/load.py [--sessions N --clients C --kills K]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.dev_support import DevProcess, free_port, request  # noqa: E402

from loopengine.domain.base.clock import SystemClock  # noqa: E402
from loopengine.domain.base.errors import InvalidInput  # noqa: E402
from loopengine.domain.messages import check_protocol  # noqa: E402
from loopengine.domain.turns import TurnStatus  # noqa: E402
from loopengine.stores.sqlite import open_sqlite_stores  # noqa: E402

AGENT = "customer-service-load"
SHIPPED = ROOT / "src" / "agents" / "customer_service"
TOOLS_PY = """\
import json
import os
import time
from pathlib import Path

from agents.customer_service import tools as shipped
from loopengine import Tool, ToolContext

LEDGER = Path(__file__).parent / "ledger.log"
DELAY = float(os.environ.get("LOAD_TOOL_DELAY") or 0)


def _logged(tool):
    def run(args, ctx: ToolContext):
        with LEDGER.open("a") as out:
            out.write(json.dumps({"tool": tool.name, "turn": ctx.turn_id, "call": ctx.call_id}) + "\\n")
        time.sleep(DELAY)  # a slower backend: kills land mid-call more often
        return tool.execute(args)

    return run


TOOLS = [Tool(t.name, t.description, t.input_schema, _logged(t)) for t in shipped.TOOLS]
"""
SCRIPT_PY = "from agents.customer_service.script import respond  # noqa: F401\n"
FAST = {"LOOPENGINE_LEASE_SECONDS": "2", "LOOPENGINE_HANDOFF_GRACE_SECONDS": "1"}
"""Short lease and grace, only with ``--fast`` (the smoke test): the default is production's (60 s)."""
ERRORS = (OSError, http.client.HTTPException, ValueError)


@dataclass
class Report:
    """What one load run found."""

    sessions: int = 0
    turns: int = 0
    finished: int = 0
    replaced: int = 0
    stuck: int = 0
    duplicated_turns: int = 0
    double_runs: int = 0
    protocol_violations: int = 0
    unknown_outcomes: int = 0
    swept: int = 0
    kills: int = 0
    client_retries: int = 0
    seconds: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=dict)
    stop_reasons: dict[str, int] = field(default_factory=dict)
    executions: dict[str, tuple[int, int]] = field(default_factory=dict)

    def table(self) -> str:
        """A readable table of the figures."""
        rows = [
            ("sessions", self.sessions),
            ("turns", self.turns),
            ("finished", f"{self.finished} {dict(sorted(self.stop_reasons.items()))}"),
            ("replaced (superseded)", self.replaced),
            ("re-sent messages that made a 2nd turn", self.duplicated_turns),
            ("stuck (not at rest)", self.stuck),
            ("double runs", self.double_runs),
            ("protocol violations", self.protocol_violations),
            ("unknown outcomes", self.unknown_outcomes),
            (
                "tool runs / claims",
                ", ".join(f"{t} {r}/{c}" for t, (r, c) in sorted(self.executions.items())),
            ),
            ("turns handed on by the sweep", self.swept),
            ("kill -9 restarts", self.kills),
            ("client retries", self.client_retries),
            ("wall time", f"{self.seconds:.1f} s"),
        ]
        for name, values in sorted(self.latencies.items()):
            if values:
                p50, p95 = _percentile(values, 50), _percentile(values, 95)
                rows.append(
                    (f"{name} p50 / p95", f"{p50 * 1000:.0f} / {p95 * 1000:.0f} ms  (n={len(values)})")
                )
        width = max(len(n) for n, _ in rows)
        return "\n".join(f"  {n:<{width}}  {v}" for n, v in rows)

    @property
    def ok(self) -> bool:
        """Every turn at rest, nothing ran twice, every history well formed."""
        return (
            self.stuck == 0
            and self.double_runs == 0
            and self.protocol_violations == 0
            and self.replaced == 0
            and self.duplicated_turns == 0
        )


def _percentile(values: list[float], pct: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def write_agent(root: Path) -> Path:
    """The customer-service agent, renamed, its tools appending to ``ledger.log``."""
    folder = root / "customer_service_load"
    folder.mkdir(parents=True)
    yaml = (SHIPPED / "agent.yaml").read_text().replace("name: customer-service", f"name: {AGENT}", 1)
    (folder / "agent.yaml").write_text(yaml)
    (folder / "rules.yaml").write_text((SHIPPED / "rules.yaml").read_text())
    (folder / "tools.py").write_text(TOOLS_PY)
    (folder / "script.py").write_text(SCRIPT_PY)
    return folder


class Run:
    """One load run: the server, its store (read directly for the checks) and the clients."""

    def __init__(
        self, work: Path, workers: int, sweep_interval: float, tool_delay: float, quiet: bool, fast: bool
    ) -> None:
        self.db = work / "load.db"
        self.folder = write_agent(work / "agents")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}
        if fast:
            env.update(FAST)
        env.update(
            LOOPENGINE_DB=str(self.db),
            LOOPENGINE_AGENTS_PATH=str(work / "agents"),
            LOOPENGINE_MODEL="scripted",
            LOOPENGINE_ADMIN_AUTH="admin:secret",
            LOAD_TOOL_DELAY=str(tool_delay),
        )
        args = ("--workers", str(workers), "--sweep-interval", str(sweep_interval))
        self.dev = DevProcess(env, free_port(), None if quiet else work / "dev.log", args)
        self.report = Report()
        self.done = 0
        self._lock = threading.Lock()

    def note(self, kind: str, seconds: float) -> None:
        with self._lock:
            self.report.latencies.setdefault(kind, []).append(seconds)

    def call(
        self, method: str, path: str, body: Any = None, key: str | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        """One request; ``None`` (and a short pause) when the server is down or the answer lost."""
        try:
            return request(
                self.dev.port, method, path, body, headers={"Idempotency-Key": key} if key else None
            )
        except ERRORS:
            with self._lock:
                self.report.client_retries += 1
            time.sleep(0.2)
            return None

    def turn_of(self, session_id: str) -> str | None:
        """The session's turn as the store has it (when the answer to the message was lost)."""
        stores = open_sqlite_stores(str(self.db), SystemClock())
        try:
            turns = stores.turns.session_turns(session_id)
        finally:
            stores.close()
        return turns[-1].turn_id if turns else None

    def drive(self, session_id: str, timeout: float) -> None:
        """One session from message to finish, approving every pending item."""
        began = time.monotonic()
        deadline = began + timeout
        turn_id: str | None = None
        message = {"message": "Order A-1001 arrived broken.", "sessionId": session_id}
        key = f"{session_id}-message"  # the same key for every send of this one message
        while time.monotonic() < deadline:
            if turn_id is None:
                t = time.monotonic()
                got = self.call("POST", f"/agents/{AGENT}/messages", message, key)
                if got is not None and got[0] in (200, 202):
                    self.note("message", time.monotonic() - t)
                    turn_id = got[1]["turnId"]
                    again = self.call("POST", f"/agents/{AGENT}/messages", message, key)  # a client retry
                    if again is not None and again[0] < 300 and again[1].get("turnId") != turn_id:
                        with self._lock:
                            self.report.duplicated_turns += 1
                continue
            got = self.call("GET", f"/turns/{turn_id}")
            if got is None or got[0] != 200:
                continue
            view = got[1]
            if view["status"] == "finished":
                self.note("session", time.monotonic() - began)
                break
            if view["status"] == "paused" and view["pendingItems"]:
                for item in view["pendingItems"]:
                    t = time.monotonic()
                    path = f"/pending-approvals/{item['pendingId']}/resolve?wait=10"
                    answer = self.call("POST", path, {"decision": "approve"})
                    if answer is not None and answer[0] < 300:
                        self.note("resolve", time.monotonic() - t)
            else:
                time.sleep(0.1)
        with self._lock:
            self.done += 1

    def killer(self, kills: int, sessions: int) -> None:
        """Kill the server -9 (all of it) at evenly spaced points of progress, then start it again."""
        for k in range(kills):
            while self.done < (k + 1) * sessions // (kills + 1) and self.done < sessions:
                time.sleep(0.05)
            if self.done >= sessions:
                return
            self.dev.kill()
            self.report.kills += 1
            self.dev.start()

    def settle(self, timeout: float) -> None:
        """Wait for the sweep to bring every turn to rest, approving what is left parked."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stores = open_sqlite_stores(str(self.db), SystemClock())
            try:
                open_items = [i for cp in stores.checkpoints.list_open("") for i in cp.outstanding.values()]
                restless = stores.turns.due_turns(time.time() + 3600, 10_000)
            finally:
                stores.close()
            for item in open_items:
                self.call("POST", f"/pending-approvals/{item.pending_id}/resolve", {"decision": "approve"})
            if not open_items and all(t.status is TurnStatus.PAUSED for t in restless):
                return
            time.sleep(0.5)

    def check(self, sessions: list[str]) -> None:
        """Count what the store and the ledger say (see the module docstring)."""
        rep = self.report
        rep.sessions = len(sessions)
        stores = open_sqlite_stores(str(self.db), SystemClock())
        try:
            claims: dict[str, int] = {}
            for sid in sessions:
                turns = stores.turns.session_turns(sid)
                history = stores.sessions.load(sid)
                try:
                    check_protocol(history)
                    if (
                        history
                        and history[-1].tool_uses
                        and all(t.status is TurnStatus.FINISHED for t in turns)
                    ):
                        raise InvalidInput("a finished session ends on an unanswered tool_use")
                except InvalidInput:
                    rep.protocol_violations += 1
                for turn in turns:
                    rep.turns += 1
                    superseded = turn.stop_reason is not None and turn.stop_reason.value == "superseded"
                    if turn.status is TurnStatus.FINISHED and superseded:
                        rep.replaced += 1
                    elif turn.status is TurnStatus.FINISHED:
                        rep.finished += 1
                        reason = turn.stop_reason.value if turn.stop_reason else "?"
                        rep.stop_reasons[reason] = rep.stop_reasons.get(reason, 0) + 1
                    else:
                        rep.stuck += 1
                    for call in stores.turns.calls(turn.turn_id).values():
                        claims[call.tool] = claims.get(call.tool, 0) + 1
                        rep.unknown_outcomes += call.outcome == "unknown"
                    events = stores.turns.events(turn.turn_id)
                    rep.swept += any(e["type"] == "sweep_handed_on" for e in events)
        finally:
            stores.close()
        ran: dict[str, int] = {}
        per_call: dict[tuple[str, str], int] = {}
        ledger = self.folder / "ledger.log"
        for line in ledger.read_text().splitlines() if ledger.exists() else []:
            entry = json.loads(line)
            ran[entry["tool"]] = ran.get(entry["tool"], 0) + 1
            call_id = (entry["turn"], entry["call"])
            per_call[call_id] = per_call.get(call_id, 0) + 1
        # a call id (turn, tool_use id) that ran more than once ran twice, whatever the totals say
        rep.double_runs = sum(n - 1 for n in per_call.values() if n > 1)
        rep.executions = {t: (ran.get(t, 0), claims.get(t, 0)) for t in sorted({*ran, *claims})}


def run(
    sessions: int = 200,
    clients: int = 16,
    kills: int = 0,
    workers: int = 4,
    sweep_interval: float = 1.0,
    tool_delay: float = 0.0,
    quiet: bool = True,
    session_timeout: float = 120.0,
    fast: bool = False,
) -> Report:
    """Drive ``sessions`` through a fresh ``loopengine dev``; return the report."""
    with tempfile.TemporaryDirectory(prefix="loopengine-load-") as tmp:
        load = Run(Path(tmp), workers, sweep_interval, tool_delay, quiet, fast)
        began = time.monotonic()
        load.dev.start()
        try:
            killer = threading.Thread(target=load.killer, args=(kills, sessions), daemon=True)
            killer.start()
            ids = [f"load-{i:05d}" for i in range(sessions)]
            with ThreadPoolExecutor(clients) as pool:
                list(pool.map(lambda sid: load.drive(sid, session_timeout), ids))
            killer.join()
            load.settle(30.0 if fast else 60.0 + 60.0 + 2 * sweep_interval + 30.0)  # lease + grace + sweeps
            load.report.seconds = time.monotonic() - began
        finally:
            load.dev.stop()
        load.check(ids)
        return load.report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--kills", type=int, default=0, help="kill -9 restarts of the server mid-run")
    parser.add_argument("--workers", type=int, default=4, help="execution environments of the server")
    parser.add_argument("--sweep-interval", type=float, default=1.0)
    parser.add_argument("--tool-delay", type=float, default=0.0, help="seconds each tool call takes")
    parser.add_argument("--fast", action="store_true", help="2 s lease / 1 s grace instead of production's")
    args = parser.parse_args()
    print(
        f"load: {args.sessions} sessions x {args.clients} clients, {args.kills} kill -9 restarts, "
        f"tools take {args.tool_delay:g} s ..."
    )
    report = run(
        args.sessions,
        args.clients,
        args.kills,
        args.workers,
        args.sweep_interval,
        args.tool_delay,
        fast=args.fast,
    )
    print(report.table())
    print("OK: every turn at rest" if report.ok else "FAILED: see above")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
