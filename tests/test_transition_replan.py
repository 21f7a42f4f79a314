"""A stale session append is raised at once for the caller to re-plan, not retried 50 times into a 409."""

from __future__ import annotations

import pytest

from loopengine.app.ports import Append, Change
from loopengine.domain.base.errors import VersionConflict
from loopengine.domain.messages import Message
from loopengine.domain.turns import TurnRecord
from loopengine.models.scripted import ScriptedModel, say
from tests.harness import Calls, agent
from tests.scenario import scenario


def test_a_stale_append_is_raised_after_one_try_with_the_sessions_length() -> None:
    calls = Calls()
    with scenario(
        agent("shop", [calls.tool("lookup")], {"rules": []}), model=ScriptedModel.from_list([say("hi")])
    ) as h:
        out = h.engine.send_message("shop", "hello", session_id="ses_stale")
        tries = []

        def decide(t: TurnRecord, _cp: object) -> Change:
            tries.append(1)
            return Change(t.turn_id, append=Append("ses_stale", (Message.user_text("late"),), 0))  # stale: 0

        with pytest.raises(VersionConflict) as lost:
            h.rt.transition(out.turn_id, decide)
        assert len(tries) == 1
        assert lost.value.current == len(h.rt.stores.sessions.load("ses_stale"))
