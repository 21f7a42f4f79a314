"""Session ids are scoped by tenant (DESIGN.md "Idempotency": "two tenants may use the same
``sessionId`` and get two sessions"; issue 13: "a tenant-A user can take sessionId 'bobs-next'
before tenant B, and 404-vs-200 tells them an id exists elsewhere").

On both stores: tenant A and tenant B each send a message with the same ``sessionId``; each gets a
session of its own (its own turn, its own history), and what B sees for that id is the same whether
A used it first or not.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.app.engine import Engine
from loopengine.app.ports import Stores
from loopengine.app.request.resolution import Decider
from loopengine.app.runtime import Runtime
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import Forbidden, NotFound
from loopengine.domain.turns import TurnRecord, TurnStatus
from loopengine.models.scripted import ScriptedModel, say
from tests.contract.conftest import ADAPTERS
from tests.harness import Calls, RecordingNotifier, StaticAgents, agent

ALICE = Decider("alice", tenants=frozenset({"acme"}))
BOB = Decider("bob", tenants=frozenset({"bobco"}))
OPERATOR = Decider("admin", kind="operator")
SHARED = "bobs-next"


@pytest.fixture(params=sorted(ADAPTERS))
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    factory = ADAPTERS[request.param]
    with factory(tmp_path, FakeClock()) as stores:
        yield _engine(stores)


def _engine(stores: Stores) -> Engine:
    cfg = agent("shop", [Calls().tool("lookup")], {"rules": [], "default_decision": "allow"})
    model = ScriptedModel(lambda request: say(f"seen {len(request.messages)} message(s)"))
    rt = Runtime(
        stores=stores,
        agents=StaticAgents(cfg),
        model_for=lambda _c: model,
        notifier_for=lambda _c: RecordingNotifier(),
        invoker=_NoInvoke(),
    )
    return Engine(rt)


class _NoInvoke:
    def invoke(self, turn_id: str, version: str | None = None) -> None:
        raise AssertionError("nothing here is handed on")


def _seen(engine: Engine, who: Decider, text: str) -> Any:
    out = engine.send_message("shop", text, session_id=SHARED, sender=who)
    assert out.status is TurnStatus.FINISHED and out.session_id == SHARED
    return out


def test_two_tenants_with_one_session_id_get_two_sessions(engine: Engine) -> None:
    first_a = _seen(engine, ALICE, "alice one")
    first_b = _seen(engine, BOB, "bob one")
    second_a = _seen(engine, ALICE, "alice two")

    assert first_b.text == "seen 1 message(s)"  # bob's session starts empty: alice's is not his
    assert second_a.text == "seen 3 message(s)"  # alice's goes on: her two messages and one answer
    assert [m.text for m in engine.history(SHARED, ALICE)] == [
        "alice one",
        "seen 1 message(s)",
        "alice two",
        "seen 3 message(s)",
    ]
    assert [m.text for m in engine.history(SHARED, BOB)] == ["bob one", "seen 1 message(s)"]
    assert len({first_a.turn_id, first_b.turn_id, second_a.turn_id}) == 3


def test_what_a_tenant_sees_does_not_tell_whether_another_used_the_id(tmp_path: Path) -> None:
    """The same answers for bob whether alice took the id first or never used it."""
    seen: list[list[Any]] = []
    for alice_first in (True, False):
        with ADAPTERS["sqlite"](tmp_path / str(alice_first), FakeClock()) as stores:
            engine = _engine(stores)
            if alice_first:
                _seen(engine, ALICE, "alice one")
            with pytest.raises(NotFound):
                engine.history(SHARED, BOB)
            out = _seen(engine, BOB, "bob one")
            mine = [m.text for m in engine.history(SHARED, BOB)]
            seen.append([out.status, out.stop_reason, out.text, mine])
    assert seen[0] == seen[1]


def test_a_tenant_named_outside_the_callers_scope_is_refused(engine: Engine) -> None:
    _seen(engine, ALICE, "alice one")
    with pytest.raises(Forbidden):
        engine.history(SHARED, BOB, tenant="acme")
    assert engine.history(SHARED, OPERATOR, tenant="acme")[0].text == "alice one"
    with pytest.raises(NotFound):  # the operator's default tenant has no such session
        engine.history(SHARED, OPERATOR)


def test_a_turn_stored_before_the_scoping_keeps_its_sessions_bare_id(engine: Engine) -> None:
    """A turn parked across the upgrade resumes on its own history (stored under the bare id)."""
    out = _seen(engine, ALICE, "alice one")
    stored = engine.rt.stores.turns.get_turn(out.turn_id)
    assert stored is not None and stored.session_key == f"acme/{SHARED}"
    old = stored.to_dict()
    del old["scopedSession"]  # as a record written before this version
    assert TurnRecord.from_dict(old).session_key == SHARED
