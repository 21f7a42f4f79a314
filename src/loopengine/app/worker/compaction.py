"""A session that never outgrows its window: each model request measured, and compacted when due.

Before a model call (:func:`prepare`) the request is built from the history since the latest
compaction and measured (:mod:`loopengine.domain.tokens.context_window`). Past the agent's threshold the
oldest whole exchanges are compacted: ``summarize`` asks the model for a summary of them (and of the
previous summary; the call's usage is the turn's, like any call's), ``trim`` drops them. The
compaction is a durable record of the session (``{"upTo", "summary"?}``) written with the turn's
compare-and-set, so only the runner holding the turn compacts, once: a crash before the write
loses only the summary call (the next runner asks again), one after it finds the session compacted.
Later steps read the session from there on. Nothing is deleted from the session.
"""

from __future__ import annotations

import json
from dataclasses import replace

from loopengine.app import faults
from loopengine.app.ports import Change, Compact, ModelRequest
from loopengine.app.worker.model_call import call_model
from loopengine.app.worker.runner import Worker
from loopengine.authoring.agent import AgentConfig
from loopengine.domain.base.jsontypes import JsonDict
from loopengine.domain.checkpoint import TurnCheckpoint
from loopengine.domain.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from loopengine.domain.tokens import context_window as cw
from loopengine.domain.tokens.context_window import Compaction, History
from loopengine.domain.tokens.usage import Usage
from loopengine.domain.turns import TurnRecord, TurnStatus

SUMMARY_SYSTEM = (
    "You write the running summary of a conversation between a user and an assistant that uses tools, "
    "so the assistant can continue it without the messages summarized. Keep every fact, identifier "
    "(order numbers, amounts, ids, names), decision, tool outcome, promise and open question that may "
    "matter later; drop pleasantries. Write plain prose in the third person, at most a few hundred words."
)
RESULT_CHARS = 1_500
"""Characters of one tool result a summary request shows."""


def prepare(
    worker: Worker, config: AgentConfig, turn: TurnRecord, history: History
) -> tuple[TurnRecord, ModelRequest] | None:
    """The next model request, the session compacted first when the request is past the threshold.

    Returns the turn as the compaction's write left it (or as given), and the request; ``None`` when
    the turn turned out not to be this worker's any more (the write found it moved).
    """
    policy = config.context or cw.ContextPolicy()
    request = _request(config, history, policy)
    measured = cw.estimate(request.system, request.tools, request.messages)
    if measured <= policy.threshold(config.max_tokens):
        return turn, request
    summarize = policy.strategy == "summarize"
    fixed = cw.estimate(request.system, request.tools, [])
    room = policy.target(config.max_tokens) - fixed - (policy.summary_tokens() if summarize else 0)
    up_to = cw.plan_cut(history, turn.start_seq, room)
    if up_to is None:  # only the current turn is left: its messages are never dropped
        return turn, request
    summary, usage = _summarize(worker, config, history, up_to, policy) if summarize else (None, None)
    faults.point("compaction_summarized")
    compaction = Compaction(up_to, summary)
    compacted = _write(worker, turn, compaction, usage, measured, policy)
    if compacted is None:
        return None
    history.compact(compaction)
    faults.point("compacted")
    return compacted, _request(config, history, policy)


def _request(config: AgentConfig, history: History, policy: cw.ContextPolicy) -> ModelRequest:
    messages = cw.request_messages(history, policy)
    return ModelRequest(config.model, config.system, config.max_tokens, messages, config.tool_specs())


def _summarize(
    worker: Worker, config: AgentConfig, history: History, up_to: int, policy: cw.ContextPolicy
) -> tuple[str | None, Usage]:
    """The model's summary of the previous summary and messages ``history.start`` to ``up_to``."""
    transcript = _transcript(history, up_to, policy)
    ask = Message.user_text(f"{transcript}\n\nWrite the summary of the conversation above.")
    request = ModelRequest(config.model, SUMMARY_SYSTEM, policy.summary_tokens(), [ask], [])
    response = call_model(worker, worker.rt.model_for(config), request, stream_text=False)
    text = "\n".join(b.text for b in response.content if isinstance(b, TextBlock)).strip()
    return text or None, response.usage


def _transcript(history: History, up_to: int, policy: cw.ContextPolicy) -> str:
    """The messages to summarize as text, the previous summary first; long ones cut, the whole bounded."""
    lines: list[str] = []
    if history.compaction is not None and history.compaction.summary:
        lines.append(f"Summary of what came before:\n{history.compaction.summary}")
    names: dict[str, str] = {}
    for message in history[history.start : up_to]:
        for block in message.content:
            if isinstance(block, TextBlock):
                lines.append(f"{message.role.capitalize()}: {block.text}")
            elif isinstance(block, ToolUseBlock):
                names[block.id] = block.name
                lines.append(
                    f"Assistant called {block.name} with {json.dumps(block.input, ensure_ascii=False)}"
                )
            elif isinstance(block, ToolResultBlock):
                content = block.content
                if len(content) > RESULT_CHARS:
                    content = (
                        content[:RESULT_CHARS]
                        + f" [... {len(block.content) - RESULT_CHARS:,} more characters]"
                    )
                lines.append(f"{names.get(block.tool_use_id, 'tool')} returned: {content}")
    text = "\n".join(lines)
    room = int((policy.window_tokens - policy.summary_tokens()) * 0.8 * cw.CHARS_PER_TOKEN)
    if len(text) > room:  # keep both ends: how it began, and what led up to the turns kept
        text = text[: room // 2] + "\n[...]\n" + text[-(room // 2) :]
    return text


def _write(
    worker: Worker,
    turn: TurnRecord,
    compaction: Compaction,
    usage: Usage | None,
    measured: int,
    policy: cw.ContextPolicy,
) -> TurnRecord | None:
    """The compaction, with the summary call's usage on the turn: one write, if the turn is still ours."""
    rt = worker.rt
    data: JsonDict = {"upTo": compaction.up_to, "strategy": policy.strategy, "promptTokens": measured}
    if usage is not None:
        data["usage"] = usage.as_json()
    event = rt.stamp("compaction", **data)
    add = Compact(turn.session_key, compaction)

    def decide(t: TurnRecord, _cp: TurnCheckpoint | None) -> Change | None:
        if t.status is not TurnStatus.RUNNING or t.runner != worker.runner:
            return None
        held = t if usage is None else replace(t, metered=t.metered.plus(usage))
        return Change(t.turn_id, turn=held, compact=add, events=(event,))

    done = rt.transition(turn.turn_id, decide, turn=turn)
    return None if done is None else done.turn
