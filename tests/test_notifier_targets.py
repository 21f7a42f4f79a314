"""Several notifier targets per agent (``notifiers:``), each delivered, retried and pinned on its own.

The agents here are folders loaded by the real registry, the engine is the bootstrap's ``build_engine``
(so the real ``NotifierChooser`` builds each target's channel), and the targets are webhooks to a real
HTTP endpoint on 127.0.0.1 that checks every signature and can be taken down per path. Delivery runs on
SQLite and on DynamoDB (moto).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loopengine.app.engine import Engine
from loopengine.app.ports import Stores
from loopengine.app.request.resolution import Decider
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.registry import AgentRegistry
from loopengine.authoring.tools import ASK_USER
from loopengine.bootstrap import build_engine
from loopengine.channels.base import CHANNELS
from loopengine.channels.signing import signature_header, verify_webhook
from loopengine.domain import outbox
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import AgentUnavailable
from loopengine.domain.decisions import Approval, Reply
from tests.agent_folders import AGENT_YAML, write_agent
from tests.contract.conftest import make_dynamodb, make_sqlite
from tests.http_support import Answer, PostServer

SECRET = "targets-test-secret"
OPS = Decider("ops")

TOOLS_PY = """\
from loopengine.authoring.tools import Tool

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
TOOLS = [
    Tool("refund", "Refund something.", SCHEMA, lambda args: {"refunded": args["x"]}),
    Tool("lookup", "Look something up.", SCHEMA, lambda args: {"found": args["x"]}),
]
"""

SCRIPT_PY = """\
from loopengine.models.scripted import call, say, use


def respond(request):
    msgs = request.messages
    start = max(i for i, m in enumerate(msgs) if m.role == "user" and m.text)
    done = sum(len(m.tool_results) for m in msgs[start + 1 :])
    if done == 0:
        return call(use("refund", {"x": 1}), use("lookup", {"x": 2}))
    if done == 2:
        return call(use("system_ask_user", {"question": "Which order?"}))
    return say("all done")
"""

RULES_YAML = "rules: []\ndefault_decision: ask\n"


# -- a real webhook endpoint, down on demand -----------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One POST: the path it came to, its JSON body and whether its signature verified."""

    path: str
    body: dict[str, Any]
    verified: bool


class Hooks(PostServer):
    """Webhook endpoints on 127.0.0.1, one per path; a path in ``down`` answers 503 (and counts the try)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.hits: list[Hit] = []
        self.tries: dict[str, int] = {}
        self.down: set[str] = set()
        self._lock = threading.Lock()

    def respond(self, path: str, headers: dict[str, str], raw: bytes) -> Answer:
        return Answer(b"", self.took(path, raw, headers), content_type=None)

    def took(self, path: str, raw: bytes, headers: dict[str, str]) -> int:
        body = json.loads(raw)
        signature = headers.get(signature_header(body["event"]).lower())
        try:
            verify_webhook(SECRET, raw, signature, now=self.clock.now())
            verified = True
        except Exception:
            verified = False
        with self._lock:
            self.tries[path] = self.tries.get(path, 0) + 1
            if path in self.down:
                return 503
            self.hits.append(Hit(path, body, verified))
        return 204

    def url(self, path: str) -> str:
        return f"{self.origin}{path}"

    def at(self, path: str, event: str | None = None) -> list[dict[str, Any]]:
        """The bodies ``path`` took (of ``event``), each checked to have been signed."""
        with self._lock:
            found = [h for h in self.hits if h.path == path and (event is None or h.body["event"] == event)]
        assert all(h.verified for h in found)
        return [h.body for h in found]


# -- agents and engines ----------------------------------------------------------------------------


def target(
    hooks: Hooks, path: str, events: str = "", tools: str = "", secret_env: str = "HOOK_SECRET"
) -> str:
    """One ``notifiers:`` entry: a webhook to ``path``."""
    text = f"  - channel: webhook\n    config: {{url: {hooks.url(path)!r}, secret_env: {secret_env}}}\n"
    text += f"    events: [{events}]\n" if events else ""
    return text + (f"    tools: [{tools}]\n" if tools else "")


def shop(root: Path, *targets: str) -> None:
    """The agent ``shop`` (tools refund and lookup, everything asks) with ``targets``."""
    agent = AGENT_YAML.format(name="shop").replace("[refund]", "[refund, lookup]")
    agent += "notifiers:\n" + "".join(targets)
    write_agent(root, "shop", agent=agent, rules=RULES_YAML, tools=TOOLS_PY, script=SCRIPT_PY)


STORES = {"sqlite": make_sqlite, "dynamodb": make_dynamodb}


@contextmanager
def engine(kind: str, root: Path, clock: FakeClock) -> Iterator[Engine]:
    """The bootstrap's engine over ``root``'s agents, on ``kind`` stores, with the offline model."""
    factory = STORES[kind]
    made: AbstractContextManager[Stores] = factory(root / "db", clock)
    with made as stores:
        env = {"LOOPENGINE_MODEL": "scripted", "HOOK_SECRET": SECRET}
        registry = AgentRegistry(package=None, paths=[root])
        yield build_engine(env, stores=stores, clock=clock, registry=registry)


@pytest.fixture(params=sorted(STORES))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def audit(e: Engine, turn_id: str, kind: str) -> list[dict[str, Any]]:
    return [a for a in e.audit(turn_id) if a["type"] == kind]


def everything_due(e: Engine) -> list[outbox.OutboxRecord]:
    return e.rt.stores.turns.due_outbox(e.rt.stores.clock.now() + 10**9)


# -- delivery --------------------------------------------------------------------------------------


def test_each_target_gets_the_events_and_tools_it_takes(kind: str, tmp_path: Path) -> None:
    clock = FakeClock()
    with Hooks(clock) as hooks:
        shop(
            tmp_path,
            target(hooks, "/finance", events="approval", tools="refund"),
            target(hooks, "/support", events="question"),
            target(hooks, "/all"),
        )
        with engine(kind, tmp_path, clock) as e:
            out = e.send_message("shop", "my order broke")
            refund, lookup = out.pending
            assert (refund.tool, lookup.tool) == ("refund", "lookup")

            # finance: the refund's approval only; support: nothing yet; all: the start and both approvals
            [approval] = hooks.at("/finance")
            assert (approval["event"], approval["pendingId"]) == ("approval", refund.pending_id)
            assert hooks.at("/support") == []
            assert [b["event"] for b in hooks.at("/all")] == ["run_start", "approval", "approval"]
            same = [b for b in hooks.at("/all", "approval") if b["pendingId"] == refund.pending_id]
            assert [b["eventId"] for b in same] == [approval["eventId"]]  # one event, one eventId

            e.resolve(refund.pending_id, Approval(), OPS)
            e.resolve(lookup.pending_id, Approval(), OPS)
            [question] = e.outcome(out.turn_id).pending
            [asked] = hooks.at("/support")
            assert (asked["event"], asked["pendingId"]) == ("question", question.pending_id)
            assert len(hooks.at("/finance")) == 1  # questions are system_ask_user's: not refund's

            e.answer(question.pending_id, Reply("A-1"), OPS)
            assert [b["event"] for b in hooks.at("/all")][-1] == "run_finish"
            assert hooks.at("/all", "run_finish")[0]["text"] == "all done"
            assert len(hooks.at("/finance")) == 1 and len(hooks.at("/support")) == 1

            notified = audit(e, out.turn_id, "notified")
            approvals = [n for n in notified if n["eventId"] == approval["eventId"]]
            assert sorted(n["target"] for n in approvals) == ["t0", "t2"]
            assert everything_due(e) == []


def test_a_failing_target_is_retried_alone_with_the_same_event_id(kind: str, tmp_path: Path) -> None:
    clock = FakeClock()
    with Hooks(clock) as hooks:
        shop(tmp_path, target(hooks, "/ok", events="approval"), target(hooks, "/flaky", events="approval"))
        hooks.down.add("/flaky")
        with engine(kind, tmp_path, clock) as e:
            out = e.send_message("shop", "my order broke")
            assert len(hooks.at("/ok")) == 2 and hooks.tries["/flaky"] == 2

            due = everything_due(e)
            assert sorted((r.target, r.attempts) for r in due) == [("t1", 1), ("t1", 1)]
            assert all(r.key == f"{r.event_id}#t1" for r in due)
            ids = {b["eventId"] for b in hooks.at("/ok")}
            assert {r.event_id for r in due} == ids  # the same eventIds as the copies that arrived
            failed = audit(e, out.turn_id, "notification_failed")
            assert {(f["target"], f["eventId"]) for f in failed} == {("t1", i) for i in ids}

            clock.advance(outbox.FIRST_RETRY_SECONDS)
            assert e.sweep().notified == 2  # the sweep tries t1 alone, still down
            assert hooks.tries["/flaky"] == 4 and len(hooks.at("/ok")) == 2

            hooks.down.clear()
            clock.advance(2 * outbox.FIRST_RETRY_SECONDS)
            e.sweep()
            assert {b["eventId"] for b in hooks.at("/flaky")} == ids  # same eventIds, once each
            assert len(hooks.at("/flaky")) == 2 and len(hooks.at("/ok")) == 2  # /ok never again
            assert everything_due(e) == []
            clock.advance(outbox.MAX_BACKOFF_SECONDS)
            e.sweep()
            assert len(hooks.at("/flaky")) == 2


def test_a_target_whose_channel_cannot_be_built_fails_only_its_own_records(kind: str, tmp_path: Path) -> None:
    clock = FakeClock()
    with Hooks(clock) as hooks:
        shop(tmp_path, target(hooks, "/broken", secret_env="NOT_SET_ANYWHERE"), target(hooks, "/ok"))
        with engine(kind, tmp_path, clock) as e:
            out = e.send_message("shop", "my order broke")
            assert [b["event"] for b in hooks.at("/ok")] == ["run_start", "approval", "approval"]
            assert "/broken" not in hooks.tries
            failed = audit(e, out.turn_id, "notification_failed")
            assert {f["target"] for f in failed} == {"t0"} and len(failed) == 3
            assert all("secret_env must name a set environment variable" in f["error"] for f in failed)
            assert sorted(r.target or "" for r in everything_due(e)) == ["t0"] * 3


def test_a_target_added_after_the_pause_gets_only_new_turns(kind: str, tmp_path: Path) -> None:
    clock = FakeClock()
    with Hooks(clock) as hooks:
        shop(tmp_path, target(hooks, "/old"))
        with engine(kind, tmp_path, clock) as e:
            paused = e.send_message("shop", "my order broke")
            shop(tmp_path, target(hooks, "/new"), target(hooks, "/old"))  # edited while it waits: t0 is /new

            for item in paused.pending:
                e.resolve(item.pending_id, Approval(), OPS)
            [question] = e.outcome(paused.turn_id).pending
            e.answer(question.pending_id, Reply("A-1"), OPS)

            old = [b["event"] for b in hooks.at("/old")]
            assert old == [
                "run_start",
                "approval",
                "approval",
                "run_start",
                "question",
                "run_start",
                "run_finish",
            ]
            assert hooks.at("/new") == []  # the paused turn kept the targets it started with

            fresh = e.send_message("shop", "another one")
            hashes = [e.rt.stores.turns.get_turn(t) for t in (paused.turn_id, fresh.turn_id)]
            assert hashes[0] is not None and hashes[1] is not None
            assert hashes[0].config_hash != hashes[1].config_hash
            assert [b["turnId"] for b in hooks.at("/new")] == [fresh.turn_id] * 3


def test_an_agent_without_targets_uses_the_deployment_default(tmp_path: Path) -> None:
    clock = FakeClock()
    with Hooks(clock) as hooks:
        write_agent(tmp_path, "shop", rules=RULES_YAML)
        with make_sqlite(tmp_path / "db", clock) as stores:
            env = {
                "LOOPENGINE_MODEL": "scripted",
                "LOOPENGINE_DEFAULT_WEBHOOK_URL": hooks.url("/default"),
                "LOOPENGINE_DEFAULT_WEBHOOK_SECRET": SECRET,
            }
            e = build_engine(
                env, stores=stores, clock=clock, registry=AgentRegistry(package=None, paths=[tmp_path])
            )
            out = e.send_message("shop", "refund please")
            assert [b["event"] for b in hooks.at("/default")] == ["run_start", "approval"]
            assert {n["target"] for n in audit(e, out.turn_id, "notified")} == {"t0"}


def test_a_record_written_before_targets_goes_to_the_first_target(kind: str, tmp_path: Path) -> None:
    clock = FakeClock()
    with Hooks(clock) as hooks:
        shop(tmp_path, target(hooks, "/first"), target(hooks, "/second"))
        with engine(kind, tmp_path, clock) as e:
            out = e.send_message("shop", "my order broke")
            run = e.rt.stores.turns.get_turn(out.turn_id)
            assert run is not None
            body = {"turnId": run.turn_id, "sessionId": run.session_id, "agent": "shop", "trigger": "message"}
            legacy = outbox.new_record(
                "evt_" + "0" * 32, run.turn_id, "shop", run.config_hash, "run_start", body, 0
            )
            assert legacy.target is None and legacy.key == legacy.event_id
            assert "target" not in legacy.to_dict()
            e.rt.stores.turns.put_outbox(legacy)
            e.sweep()
            assert [b["eventId"] for b in hooks.at("/first", "run_start")][-1] == legacy.event_id
            assert legacy.event_id not in {b["eventId"] for b in hooks.at("/second")}


def test_one_event_to_two_targets_is_two_records_in_the_store(kind: str, tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    factory = STORES[kind]
    with factory(tmp_path, clock) as stores:
        a, b = (
            outbox.new_record("evt_1", "trn_1", "shop", "h", "approval", {"x": 1}, 1000.0, target=t)
            for t in ("t0", "t1")
        )
        assert (a.key, b.key) == ("evt_1#t0", "evt_1#t1")
        stores.turns.put_outbox(a)
        stores.turns.put_outbox(b)
        due = stores.turns.due_outbox(2000.0)
        assert sorted(due, key=lambda r: r.key) == [a, b]  # both kept, round-tripped with their targets
        stores.turns.put_outbox(outbox.delivered(a))
        assert stores.turns.due_outbox(2000.0) == [b]  # one target's state never touches the other's


# -- agent.yaml ------------------------------------------------------------------------------------


def load(root: Path, notifiers: str, tools: str | None = None) -> AgentConfig:
    agent = AGENT_YAML.format(name="shop").replace("[refund]", tools or "[refund, lookup]") + notifiers
    write_agent(root, "shop", agent=agent, rules=RULES_YAML, tools=TOOLS_PY)
    return AgentRegistry(package=None, paths=[root]).get("shop")


def problems(root: Path, notifiers: str) -> list[tuple[int, str]]:
    with pytest.raises(AgentUnavailable) as info:
        load(root, notifiers)
    return [(p.line, p.message) for p in info.value.problems]


def test_a_list_of_targets_loads_with_keys_in_order(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "notifiers:\n"
        "  - channel: slack\n    config: {channel: '#finance'}\n    events: [approval]\n    tools: [refund]\n"
        "  - channel: redis\n    config: {url: 'redis://127.0.0.1:6379/0', key: 'loopengine:approvals'}\n"
        "    events: [approval, question]\n"
        "  - channel: webhook\n    config: {url: 'https://hooks.invalid/x', secret_env: HOOK_SECRET}\n",
    )
    t0, t1, t2 = config.targets()
    assert [(t.key, t.channel) for t in (t0, t1, t2)] == [("t0", "slack"), ("t1", "redis"), ("t2", "webhook")]
    assert (
        t0.takes("approval", "refund"),
        t0.takes("approval", "lookup"),
        t0.takes("question", ASK_USER),
    ) == (
        True,
        False,
        False,
    )
    assert (t1.takes("question", ASK_USER), t1.takes("run_finish", None)) == (True, False)
    assert all(t2.takes(event, None) for event in ("approval", "question", "run_start", "run_finish"))
    assert config.snapshot()["notifiers"][0]["tools"] == ["refund"]  # pinned with the turn's config


def test_tools_filters_approvals_and_questions_but_never_start_or_finish(tmp_path: Path) -> None:
    config = load(tmp_path, "notifiers:\n  - channel: database\n    tools: [refund, system_ask_user]\n")
    [only] = config.targets()
    assert only.takes("approval", "refund") and not only.takes("approval", "lookup")
    assert only.takes("question", ASK_USER)
    assert only.takes("run_start", None) and only.takes("run_finish", None)


def test_the_single_notifier_block_is_a_list_of_one_and_keeps_its_hash(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "notifier:\n  channel: webhook\n  config: {url: 'https://x.invalid'}\n  events: [approval]\n",
    )
    [only] = config.targets()
    assert (only.key, only.channel, only.events) == ("t0", "webhook", frozenset({"approval"}))
    assert "notifiers" not in config.snapshot()  # a folder without notifiers hashes as it did


@pytest.mark.parametrize(
    ("notifiers", "line", "message"),
    [
        (
            "notifiers:\n  - channel: slak\n",
            6,
            "notifiers[0].channel: must be 'webhook', 'email', 'sns', 'queue', 'slack', 'lark', 'redis' or "
            "'database', not 'slak' (did you mean 'slack'?)",
        ),
        (
            "notifiers:\n  - channel: webhook\n  - channel: webhook\n    event: [approval]\n",
            8,
            "notifiers[1].event: unknown key (did you mean 'events'?)",
        ),
        (
            "notifiers:\n  - channel: webhook\n    events: [approval, aproval]\n",
            7,
            "notifiers[0].events[1]: must be 'approval', 'question', 'run_start' or 'run_finish', "
            "not 'aproval' (did you mean 'approval'?)",
        ),
        (
            "notifiers:\n  - channel: webhook\n    tools: [refund, refnd]\n",
            7,
            "notifiers[0].tools[1]: 'refnd' is not a tool of this agent (its tools: refund, lookup; "
            "or system_ask_user for its questions)",
        ),
        (
            "notifiers:\n  - channel: webhook\n    events: [run_finish]\n    tools: [refund]\n",
            8,
            "notifiers[0].tools: filters only approval and question, and this target takes neither",
        ),
        ("notifiers: []\n", 5, "notifiers: list should have at least 1 item after validation"),
        (
            "notifiers:\n  - channel: webhook\n    events: []\n",
            7,
            "notifiers[0].events: list should have at least 1",
        ),
        (
            "notifier: {channel: webhook}\nnotifiers:\n  - channel: sns\n",
            6,
            "notifiers: give either notifier (one target, line 5) or notifiers (a list of targets), not both",
        ),
    ],
)
def test_target_problems_are_refused_with_their_line(
    tmp_path: Path, notifiers: str, line: int, message: str
) -> None:
    [(got_line, got)] = problems(tmp_path, notifiers)
    assert got.startswith(message), got
    assert got_line == line, got


def test_agents_check_reports_target_problems_as_file_line(tmp_path: Path) -> None:
    head = AGENT_YAML.format(name="shop")
    write_agent(tmp_path, "shop", agent=head + "notifiers:\n  - channel: slak\n")
    desk = (
        AGENT_YAML.format(name="desk")
        + "notifiers:\n  - channel: sns\n  - channel: webhook\n    tools: [nope]\n"
    )
    write_agent(tmp_path, "desk", agent=desk)
    env = {**os.environ, "LOOPENGINE_AGENTS_PATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "loopengine.local.cli", "agents", "--check"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stdout
    desk_line, shop_line = done.stdout.splitlines()
    assert desk_line.startswith(
        "desk/agent.yaml:8: notifiers[1].tools[0]: 'nope' is not a tool of this agent"
    )
    assert (
        shop_line.startswith("shop/agent.yaml:6: notifiers[0].channel: must be") and "'slack'?" in shop_line
    )
    assert "2 problem(s) in 2 of 3 agent(s)" in done.stderr


def test_the_channel_list_is_kept_once() -> None:
    from loopengine.authoring import agent_schema, channel_registry

    assert CHANNELS is channel_registry.CHANNELS is agent_schema.CHANNELS
    docs = (Path(__file__).resolve().parent.parent / "docs" / "agents.md").read_text()
    assert all(f"`{name}`" in docs for name in CHANNELS)
