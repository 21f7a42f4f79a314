"""The common scenario on LangGraph with langgraph-checkpoint-aws's DynamoDB saver (moto), metered.

Runs in the peers' environment (.venv-peers, bench/peers/requirements.txt), never the project's:
``bench/peers/run.py`` builds it and runs this file, which prints one JSON object on stdout.

The same cycle as bench/scenario.py: LangGraph's prebuilt ReAct agent (``create_react_agent``, which
LangGraph 1.x marks deprecated in favour of ``langchain.agents.create_agent``; it still ships, and is
what the issue names) with a scripted chat model that asks for ``lookup_order`` and ``issue_refund``
in one answer and then ends with text. ``issue_refund`` asks a human with ``interrupt()``
(LangGraph's human-in-the-loop), so the graph pauses there; ``Command(resume=...)`` approves it.
The checkpointer is ``DynamoDBSaver`` on a table made as the package documents (its CloudFormation
sample: ``PK``/``SK`` strings, on-demand), every request of its boto3 client metered by
bench/meter.py's :class:`Meter`, as on the loopengine side.

Phases: ``message -> pause`` (invoke until the interrupt), ``resolve`` (None: LangGraph has no
separate resolve; the decision arrives with the resume), ``resume -> finish``. Output keys match
bench/scenario.py's ``common_cycle`` (``phases``, ``totals``, ``bytes_per_pause``, ``tool_runs``)
plus ``tool_entries`` (how often each tool function was entered: a resumed node runs again from its
start, up to the ``interrupt()`` that now returns the decision) and ``versions``.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from bench.meter import Meter  # noqa: E402

TABLE = "langgraph-checkpoints"
REGION = "us-east-1"
MESSAGE = "Order A-1001 arrived broken, please refund it."
SYSTEM = (
    "You are the customer-service agent of a small online shop. Look orders up before acting on\n"
    "them. When an order arrived broken, issue a refund for its total.\n"
)
"""The system prompt of bench/agents/refund_cycle/agent.yaml (a test checks they are the same)."""
LOOKUP = {"order_id": "A-1001"}
REFUND = {"order_id": "A-1001", "amount": 212.0, "reason": "arrived broken"}
ORDERS = ROOT / "src" / "agents" / "customer_service" / "orders.json"
FAKE_AWS = {
    "AWS_DEFAULT_REGION": REGION,
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
RUNS: Counter[str] = Counter()
"""Tool name -> times its effect ran (the lookup's read, the refund's issue)."""
ENTRIES: Counter[str] = Counter()
"""Tool name -> times its function was entered."""
PACKAGES = (
    "langgraph",
    "langgraph-checkpoint-aws",
    "langgraph-checkpoint",
    "langchain-core",
    "boto3",
    "moto",
)


def build_agent(saver: Any) -> Any:
    """LangGraph's prebuilt ReAct agent with the scripted model and the two tools on ``saver``."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langgraph.prebuilt import create_react_agent

    class ScriptedChatModel(BaseChatModel):
        """Both calls in one answer; once both results are in, one closing sentence."""

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
        ) -> Any:
            start = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
            results = {m.name: m.content for m in messages[start + 1 :] if isinstance(m, ToolMessage)}
            if not results:
                n = len(messages)
                calls = [
                    {"name": "lookup_order", "args": LOOKUP, "id": f"call_{n:03d}_0", "type": "tool_call"},
                    {"name": "issue_refund", "args": REFUND, "id": f"call_{n:03d}_1", "type": "tool_call"},
                ]
                answer = AIMessage(content="", tool_calls=calls)
            else:
                refund = _parsed(results.get("issue_refund"))
                if refund.get("status") != "issued":
                    text = f"I could not refund order {REFUND['order_id']}."
                else:
                    text = (
                        f"Done: order {REFUND['order_id']} was refunded ({float(refund['amount']):.2f} USD)."
                    )
                answer = AIMessage(content=text)
            return ChatResult(generations=[ChatGeneration(message=answer)])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's deprecation notice (see module docstring)
        return create_react_agent(ScriptedChatModel(), _tools(), prompt=SYSTEM, checkpointer=saver)


def _tools() -> list[Any]:
    """``lookup_order`` and ``issue_refund`` (which asks a human with ``interrupt()``), both counted."""
    from langchain_core.tools import tool
    from langgraph.types import interrupt

    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order by id."""
        ENTRIES["lookup_order"] += 1
        RUNS["lookup_order"] += 1
        order = json.loads(ORDERS.read_text()).get(order_id)
        return json.dumps(order if order is not None else {"error": f"no order {order_id}"})

    @tool
    def issue_refund(order_id: str, amount: float, reason: str) -> str:
        """Refund (part of) an order to the customer."""
        ENTRIES["issue_refund"] += 1
        decision = interrupt({"tool": "issue_refund", "args": {"order_id": order_id, "amount": amount}})
        if decision != "approve":
            return json.dumps({"status": "denied"})
        RUNS["issue_refund"] += 1
        refund = {"refund_id": "rf_" + os.urandom(6).hex(), "order_id": order_id, "amount": amount}
        return json.dumps({**refund, "status": "issued"})

    return [lookup_order, issue_refund]


def _parsed(content: Any) -> dict[str, Any]:
    try:
        found = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def create_table(client: Any) -> None:
    """The saver's table as its CloudFormation sample makes it: PK/SK strings, on-demand."""
    client.create_table(
        TableName=TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
    )


def run_cycle(graph: Any, meter: Meter, thread: str) -> dict[str, Any]:
    """One cycle in ``thread``, metered phase by phase (bench/scenario.py's keys)."""
    from langgraph.types import Command

    config = {"configurable": {"thread_id": thread}}
    RUNS.clear()
    ENTRIES.clear()
    before = sum(meter.sizes.values())
    meter.clear()
    paused = graph.invoke({"messages": [("user", MESSAGE)]}, config)
    phases: dict[str, Any] = {"message -> pause": meter.report(), "resolve": None}
    stored = sum(meter.sizes.values()) - before
    asked = [i.value.get("tool") for i in paused.get("__interrupt__", [])]
    if asked != ["issue_refund"]:
        raise AssertionError(f"expected a pause on issue_refund, got {asked}")
    meter.clear()
    done = graph.invoke(Command(resume="approve"), config)
    phases["resume -> finish"] = meter.report()
    last = done["messages"][-1]
    if "__interrupt__" in done or not str(last.content).startswith("Done:"):
        raise AssertionError(f"the run did not finish: {last.content!r}")
    return {
        "phases": phases,
        "totals": _totals(phases),
        "bytes_per_pause": stored,
        "tool_runs": dict(sorted(RUNS.items())),
        "tool_entries": dict(sorted(ENTRIES.items())),
        "session": thread,
    }


def _totals(phases: dict[str, Any]) -> dict[str, Any]:
    ops: Counter[str] = Counter()
    index: Counter[str] = Counter()
    ran = [p for p in phases.values() if p is not None]
    for phase in ran:
        ops.update(phase["by_operation"])
        index.update(phase["index_wru"])
    return {
        "requests": sum(p["requests"] for p in ran),
        "by_operation": dict(sorted(ops.items())),
        "items_read": sum(p["items_read"] for p in ran),
        "rru": sum(p["rru"] for p in ran),
        "wru": sum(p["wru"] for p in ran),
        "index_wru": dict(sorted(index.items())),
    }


def earlier_turns(count: int) -> list[Any]:
    """The messages ``count`` finished cycles leave in a thread (what one cycle adds, ``count`` times)."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    order = json.loads(ORDERS.read_text())["A-1001"]
    out: list[Any] = []
    for n in range(count):
        calls = [
            {"name": "lookup_order", "args": LOOKUP, "id": f"early_{n}_0", "type": "tool_call"},
            {"name": "issue_refund", "args": REFUND, "id": f"early_{n}_1", "type": "tool_call"},
        ]
        refund = {"refund_id": f"rf_{n:012d}", "order_id": "A-1001", "amount": 212.0, "status": "issued"}
        out += [
            HumanMessage(MESSAGE, id=f"early_{n}_h"),
            AIMessage("", tool_calls=calls, id=f"early_{n}_a"),
            ToolMessage(
                json.dumps(order), tool_call_id=calls[0]["id"], name="lookup_order", id=f"early_{n}_t0"
            ),
            ToolMessage(
                json.dumps(refund), tool_call_id=calls[1]["id"], name="issue_refund", id=f"early_{n}_t1"
            ),
            AIMessage("Done: order A-1001 was refunded (212.00 USD).", id=f"early_{n}_d"),
        ]
    return out


def growth(graph: Any, meter: Meter, counts: list[int]) -> dict[str, Any]:
    """The cycle's figures in a thread holding 1 + N earlier finished cycles' messages, for each N.

    One more than N, as on loopengine's side (bench/scenario.py's ``with_earlier``: a session's first
    cycle, then N more finished turns).
    """
    out: dict[str, Any] = {}
    for count in counts:
        thread = f"grown-{count}"
        config = {"configurable": {"thread_id": thread}}
        graph.update_state(config, {"messages": earlier_turns(1 + count)}, as_node="agent")
        try:
            cycle = run_cycle(graph, meter, thread)
        except Exception as exc:  # e.g. a checkpoint past DynamoDB's 400 KB item limit
            too_big = "Item size has exceeded" in str(exc)
            why = "a checkpoint item over DynamoDB's 400 KB limit (no S3 offload configured)"
            out[str(count)] = {"error": why if too_big else f"{type(exc).__name__}: {str(exc)[:160]}"}
            continue
        out[str(count)] = {
            name: {k: phase[k] for k in ("requests", "items_read", "rru", "wru")}
            for name, phase in cycle["phases"].items()
            if phase is not None
        }
    return out


def main(argv: list[str]) -> dict[str, Any]:
    """A warmed-up cycle on a fresh moto table (a warm-up cycle in another thread first, as on our side).

    ``--growth 0,10,50,200``: also the cycle in threads with that many earlier cycles.
    """
    counts = [int(n) for n in argv[argv.index("--growth") + 1].split(",")] if "--growth" in argv else []
    os.environ.update(FAKE_AWS)
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_PROFILE"):
        os.environ.pop(name, None)
    import boto3
    from langgraph_checkpoint_aws import DynamoDBSaver
    from moto import mock_aws

    with mock_aws():
        create_table(boto3.client("dynamodb", region_name=REGION))
        saver = DynamoDBSaver(table_name=TABLE, region_name=REGION)
        meter = Meter(key=("PK", "SK"), index_key=None)
        meter.attach(saver.client)
        graph = build_agent(saver)
        run_cycle(graph, meter, "warm-up")
        cycle = run_cycle(graph, meter, "thread-1")
        if counts:
            cycle["growth"] = growth(graph, meter, counts)
    cycle["versions"] = {name: metadata.version(name) for name in PACKAGES}
    return cycle


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=2))
