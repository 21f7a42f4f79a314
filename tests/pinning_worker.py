"""One fresh process doing one thing to the store, as another Lambda would (tests/test_config_pinning.py).

    python -m tests.pinning_worker send AGENT MESSAGE      -> prints the turn's outcome as JSON
    python -m tests.pinning_worker resolve PENDING_ID TURN -> approves, prints the turn's outcome

Environment: LOOPENGINE_DB, LOOPENGINE_AGENTS_PATH, LOOPENGINE_MODEL=scripted.
"""

from __future__ import annotations

import json
import os
import sys

from loopengine.app.engine import Engine
from loopengine.app.invokers import InlineInvoker
from loopengine.app.outcome import TurnOutcome
from loopengine.app.request.resolution import Decider
from loopengine.bootstrap import build_runtime
from loopengine.domain.decisions import Approval


def _print(out: TurnOutcome, engine: Engine) -> None:
    turn = engine.turn(out.turn_id)
    pending = [{"pendingId": p.pending_id, "tool": p.tool, "args": p.args} for p in out.pending]
    print(
        json.dumps(
            {
                "turnId": out.turn_id,
                "status": out.status.value,
                "text": out.text,
                "configHash": turn.config_hash,
                "pending": pending,
            }
        )
    )


def main(argv: list[str]) -> None:
    invoker = InlineInvoker()
    engine = Engine(build_runtime(os.environ, invoker=invoker))
    invoker.resume = engine.resume
    if argv[0] == "send":
        _print(engine.send_message(argv[1], argv[2]), engine)
    else:
        engine.resolve(argv[1], Approval(), Decider("user:alice", "test"))
        _print(engine.outcome(argv[2]), engine)


if __name__ == "__main__":
    main(sys.argv[1:])
