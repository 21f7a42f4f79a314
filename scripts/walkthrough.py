"""Issue 17's walkthrough, end to end with the real processes, recorded as docs/walkthrough.md.

    .venv/bin/python scripts/walkthrough.py [--dir DIR] [--out docs/walkthrough.md]

As a new user types it after ``make run``, in a fresh folder (DIR; default a new temporary one):
``loopengine new-agent returns-desk`` (a charge tool with its stand-in payment API), the stand-in
started, an MCP server (examples/orders_mcp.py, built with the ``mcp`` package) started and its tools
added to the agent behind an approval rule, ``loopengine dev``, ``loopengine chat`` (the model's text
streaming, two approvals given inline), the charge looked up at the stand-in by the idempotency key the
turn's audit shows, and examples/embed.py run against the same agent. Offline: SQLite, no API key; the
model is the agent's own script.py, reached through scripts/scripted_messages_api.py so that its text
streams. Each command is printed with its output and the page written at the end; each step checks its
result, and the first that does not hold stops the walkthrough with exit status 1 and what went wrong.
Every process it started is stopped, whatever happens (also on SIGTERM).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from walkthrough_support import Shell, StepFailed, Terminal, Transcript, expect, free_port, replace_once

REPO = Path(__file__).resolve().parent.parent
AGENT, FOLDER = "returns-desk", "agents/returns_desk"
CHARGE = "Charge 12.50 to a@example.com for the broken mug"
REFUND = "Please refund order A-1001, the mug came back broken"
EMBEDDED = "Charge 30.00 to b@example.com for the late delivery"


@dataclass
class Walk:
    """What the steps learn and hand on."""

    api: str = ""
    mcp_log: str = ""
    gap: float | None = None
    """Seconds between two streamed text pieces (None: the stand-in's default)."""


def scaffold(sh: Shell, walk: Walk) -> None:
    """1. The agent, from ``loopengine new-agent``, checked and tested as its printed next steps say."""
    sh.transcript.section(
        "1. Scaffold an agent",
        "In a fresh folder, with the repository's virtualenv (what `make run` installed) activated:",
    )
    sh.adopt(f"export REPO={shlex.quote(str(REPO))}   # the loopengine repository")
    sh.adopt("source $REPO/.venv/bin/activate")
    out = sh.run(f"loopengine new-agent {AGENT}")
    expect(f"created {FOLDER}/" in out, f"new-agent did not say it created {FOLDER}/")
    export = re.search(r"^\s*(export LOOPENGINE_AGENTS_PATH=\S+)", out, re.M)
    expect(export is not None, "new-agent printed no `export LOOPENGINE_AGENTS_PATH=...` step")
    assert export is not None
    sh.adopt(export.group(1))
    out = sh.run("loopengine agents --check")
    expect(out.startswith("OK:") and AGENT in out, f"the agents check does not list {AGENT} as valid")
    out = sh.run(f"python {FOLDER}/test_returns_desk.py")
    expect(re.search(r"^Ran \d+ tests", out, re.M) is not None and out.rstrip().endswith("OK"), "its tests")


def payments(sh: Shell, walk: Walk) -> None:
    """2. The stand-in payment API the charge tool pays through."""
    sh.transcript.section(
        "2. Start the stand-in payment API",
        "The `charge` tool posts to it with the call's idempotency key (`Idempotency-Key` header).",
    )
    _, found = sh.start(f"python {FOLDER}/payments_standin.py --port 0", r"payments stand-in on (http://\S+)")
    sh.adopt(f"export PAYMENTS_URL={found.group(1)}")
    out = sh.run('curl -s "$PAYMENTS_URL/charges"')
    expect(json.loads(out) == {"charges": []}, "the stand-in does not start empty")


def mcp_server(sh: Shell, walk: Walk) -> None:
    """3. An MCP server started, its tools added to the agent, the refund behind an approval rule."""
    sh.transcript.section(
        "3. Add an MCP server's tools, the refund behind an approval rule",
        "A real MCP server (streamable HTTP, built with the `mcp` package) that wants a bearer token, "
        "which the agent reads from an environment variable ([agents.md](agents.md#mcp-servers)):",
    )
    sh.adopt("export ORDERS_TOKEN=\"Bearer $(python -c 'import secrets; print(secrets.token_hex(16))')\"")
    started, found = sh.start(
        "python $REPO/examples/orders_mcp.py --port 0", r"MCP server on (http://\S+/mcp)"
    )
    walk.mcp_log, url = str(started.log), found.group(1)
    out = sh.run(f"curl -s -o /dev/null -w '%{{http_code}}\\n' -X POST {url}   # without the token")
    expect(out.strip() == "401", f"the MCP server let a request without its token in: {out}")
    sh.edit(f"{FOLDER}/agent.yaml", lambda text: _agent_yaml(text, url))
    sh.edit(f"{FOLDER}/rules.yaml", _rules_yaml)
    sh.edit(f"{FOLDER}/script.py", _script_py)
    out = sh.run("loopengine agents --check")
    expect(out.startswith("OK:") and "warning" not in out, "the agent with its MCP server does not check")


def _agent_yaml(text: str, url: str) -> str:
    text = replace_once(
        text,
        "outcome is unknown, say so plainly and never claim it happened.\n",
        "outcome is unknown, say so plainly and never claim it happened. To refund an order, look it up\n"
        "  with orders_lookup, then refund what was paid with orders_refund.\n",
    )
    return text + (
        "mcp_servers:\n"
        "  - name: orders                       # its tools are orders_lookup and orders_refund\n"
        f"    url: {url}\n"
        "    headers_env: {Authorization: ORDERS_TOKEN}\n"
        "    tools: [lookup, refund]\n"
    )


def _rules_yaml(text: str) -> str:
    return replace_once(
        text,
        "default_decision: ask\n",
        "  - tool: orders_lookup\n"
        "    decision: allow\n"
        "  - tool: orders_refund\n"
        "    decision: ask\n"
        "    reason: money goes back to the customer; a person confirms first\n"
        "default_decision: ask\n",
    )


def _script_py(text: str) -> str:
    anchor = "        tool = request.messages[-2].tool_uses[0].name\n"
    text = replace_once(
        text,
        anchor,
        anchor + '        if tool.startswith("orders_"):\n'
        "            return _orders(tool, _result(last.tool_results[0].content))\n",
    )
    anchor = "    text = last.text.strip()\n"
    text = replace_once(
        text,
        anchor,
        anchor + "    order = ORDER.search(text)\n"
        '    if "refund" in text.lower() and order:  # look it up (allowed), then refund (asks)\n'
        '        return call(use("orders_lookup", {"order_id": order.group(0)}))\n',
    )
    anchor = "EMAIL = re.compile("
    text = replace_once(text, anchor, 'ORDER = re.compile(r"\\b[A-Z]-\\d{4}\\b")\n' + anchor)
    return text + (
        "\n\ndef _orders(tool: str, result: Any) -> ModelResponse:\n"
        '    """The next step after a tool of the orders MCP server answered."""\n'
        '    if not isinstance(result, dict) or "order_id" not in result:\n'
        '        return say(f"The orders server did not do it: {result}")\n'
        '    if tool == "orders_lookup":\n'
        '        args = {"order_id": result["order_id"], "amount_cents": result["paid_cents"], '
        '"reason": "came back broken"}\n'
        '        return call(use("orders_refund", args))\n'
        '    amount = result["amount_cents"] / 100\n'
        "    return say(\n"
        "        f\"I refunded {amount:.2f} on order {result['order_id']} ({result['refund_id']}); \"\n"
        '        "the customer sees the money back within a few days."\n'
        "    )\n"
    )


def serve(sh: Shell, walk: Walk) -> None:
    """4. ``loopengine dev``, its model the agent's script behind a streaming Messages API stand-in."""
    sh.transcript.section(
        "4. Serve it with `loopengine dev`",
        "The model: the agent's own `script.py`, served as the Anthropic Messages API streams "
        "(`scripts/scripted_messages_api.py`), so that the chat shows its text as it arrives.",
    )
    line = f"python $REPO/scripts/scripted_messages_api.py --script {FOLDER}/script.py --port 0"
    line += "" if walk.gap is None else f" --gap {walk.gap:g}"
    _, found = sh.start(line, r"Messages API stand-in on (http://\S+)")
    model, port = found.group(1), free_port()
    line = f"ANTHROPIC_BASE_URL={model} ANTHROPIC_API_KEY=standin loopengine dev --port {port}"
    sh.start(line, r"loopengine dev: http://\S+.*\n(?:.*\n)*?.*no LOOPENGINE_ADMIN_AUTH.*\n")
    walk.api = f"http://127.0.0.1:{port}"
    out = sh.run(f"curl -s {walk.api}/health")
    expect('"ok"' in out or '"status"' in out, f"loopengine dev is not healthy: {out}")


def chat(sh: Shell, walk: Walk) -> None:
    """5. ``loopengine chat``: a charge and a refund, each streamed, each approved inline."""
    sh.transcript.section(
        "5. Chat with it, watch the text stream, approve inline",
        "Each line typed is a live message; each call that needs approval is offered inline.",
    )
    argv = ["loopengine", "chat", AGENT, "--url", walk.api]
    term = Terminal(argv, sh.env, sh.cwd)
    try:
        term.expect("you> ")
        term.type(CHARGE)
        streamed = [_approve(term, "charge", r"agent> (I charged 12\.50 USD \(ch_\w+\)\.)\n")]
        term.type(REFUND)
        term.expect(r"\[tool\] orders_lookup: ok")  # allowed by its rule: it ran unasked
        streamed.append(_approve(term, "orders_refund", r"agent> (I refunded 12\.50 on order .*)\n"))
        term.ctrl_d()
        term.expect("bye")
        expect(term.wait() == 0, f"the chat exited {term.status}")
    finally:
        term.close()
    sh.transcript.command(shlex.join(argv), term.output, keep_all=True)
    expect("Traceback" not in term.output, "the chat printed a traceback")
    shown = "; ".join(f"{n} pieces over {s:.1f} s" for n, s in streamed)
    sh.transcript.note(
        f"Each reply was printed as it streamed: the terminal received them in {shown} (the model's text "
        "comes as `text:delta` events, [http-api.md](http-api.md#long-polls-and-the-event-stream))."
    )


def _approve(term: Terminal, tool: str, reply: str) -> tuple[int, float]:
    """Approve ``tool`` when the chat offers it; how the reply's text then arrived (reads, seconds)."""
    term.expect(rf"\? {tool} needs approval: ")
    term.expect(r"\[a\]pprove, \[d\]eny, \[e\]dit arguments > ")
    term.type("a")
    term.expect(rf"\[tool\] {tool}: ok")
    found = term.expect(reply)
    term.expect("you> ")
    pieces, seconds = term.pieces(found.start(1), found.end(1))
    expect(pieces >= 2, f"the reply {found.group(1)!r} did not stream: it came in {pieces} piece(s)")
    return pieces, seconds


def verify(sh: Shell, walk: Walk) -> None:
    """6. The charge at the stand-in, found by the idempotency key the turn's audit shows."""
    sh.transcript.section(
        "6. The charge went through once, under its idempotency key",
        "What an operator does about a call ([agents.md](agents.md#tool-context-idempotency-and-timeouts)): "
        "the charge names its turn, the turn's audit names the call's key, the key finds the charge.",
    )
    charges = json.loads(sh.run('curl -s "$PAYMENTS_URL/charges" | python -m json.tool'))["charges"]
    expect(len(charges) == 1 and charges[0]["amount_cents"] == 1250, f"not one charge of 1250: {charges}")
    key, turn_id = charges[0]["idempotency_key"], charges[0]["metadata"]["turn_id"]
    show = "import json,sys; t=json.load(sys.stdin); print(t['status'], '|', t['text']); " + (
        "[print(json.dumps(e)) for e in t['audit'] if e['type'] == 'tool_outcome']"
    )
    out = sh.run(f'curl -s {walk.api}/turns/{turn_id} | python -c "{show}"')
    expect(
        out.startswith("finished | I charged 12.50 USD"), "the charge's turn did not finish with the charge"
    )
    outcome = json.loads(out.splitlines()[1])
    expect(
        outcome.get("idempotencyKey") == key, f"the audit's key {outcome.get('idempotencyKey')} is not {key}"
    )
    with urllib.request.urlopen(f"{walk.api}/turns/{turn_id}", timeout=10) as reply:
        tenant = json.loads(reply.read()).get("tenant") or ""
    args = ", ".join(json.dumps(v) for v in (tenant, turn_id, outcome["toolUseId"]))
    out = sh.run(f"python -c 'from loopengine import ToolContext; print(ToolContext.key_for({args}))'")
    expect(out.strip() == key, f"the key computed from the ids ({out.strip()}) is not the charge's ({key})")
    found = json.loads(sh.run(f'curl -s "$PAYMENTS_URL/charges?idempotency_key={key}"'))["charges"]
    expect([c["id"] for c in found] == [charges[0]["id"]], "the key does not find the charge")
    pieces = "import json,sys; e=json.load(sys.stdin)['events']; " + (
        "print(json.dumps([x['text'] for x in e if x['type'] == 'text:delta']))"
    )
    out = sh.run(f'curl -s {walk.api}/turns/{turn_id}/events | python -c "{pieces}"')
    expect(len(json.loads(out)) >= 2, "the turn's events hold no streamed text pieces (text:delta)")
    log = Path(walk.mcp_log).read_text()
    sh.transcript.note("And the orders MCP server's terminal (one line per tool run):")
    sh.transcript.block(log)
    ran = [line.split(":")[0] for line in log.splitlines()[1:]]
    expect(
        ran == ["lookup A-1001", "refund A-1001 1250 usd"],
        f"the MCP server ran {ran}, not one lookup, one refund",
    )


def embed(sh: Shell, walk: Walk) -> None:
    """7. The same agent embedded with the Python API (examples/embed.py)."""
    sh.transcript.section(
        "7. Embed the same agent from Python",
        "[python.md](python.md)'s example, given the agent and a message; offline (its own SQLite store "
        "in a temporary folder, the agent's script as the model, streaming in-process), the same "
        "payment stand-in and MCP server:",
    )
    out = sh.run(f'python $REPO/examples/embed.py {AGENT} "{EMBEDDED}"')
    for needed in ("pending: charge", "approved charge: 0 outstanding", "finished: I charged 30.00 USD"):
        expect(needed in out, f"embed.py did not print {needed!r}")
    streamed = re.search(r"agent: I charged 30\.00 USD .*\((\d+) pieces\)", out)
    expect(streamed is not None and int(streamed.group(1)) > 2, "embed.py's turn did not stream its text")
    expect("plugged store: turn finished" in out, "embed.py's plugged store did not finish its turn")
    show = (
        "import json,sys; [print(c['amount_cents'], c['idempotency_key'], c['metadata']['approved_by']) "
        + ("for c in json.load(sys.stdin)['charges']]")
    )
    rows = [
        line.split() for line in sh.run(f'curl -s "$PAYMENTS_URL/charges" | python -c "{show}"').splitlines()
    ]
    expect(
        [r[0] for r in rows] == ["1250", "3000"] and rows[0][1] != rows[1][1],
        f"two charges, two keys: {rows}",
    )


STEPS = [scaffold, payments, mcp_server, serve, chat, verify, embed]


HEADER = """\
# The walkthrough, recorded

Produced by `scripts/walkthrough.py` on {date} (run it again to write this page again:
`.venv/bin/python scripts/walkthrough.py`). It is issue 17's walkthrough as a new user types it after
`make run`, with the real processes: scaffold an agent whose `charge` tool pays through a stand-in
payment API with the call's idempotency key, add an MCP server's tools with the refund behind an
approval rule, serve it with `loopengine dev`, chat with it and watch the model's text stream, approve
inline, find the charge by its key, and embed the same agent from the Python example. Every command
below ran, in this order, in a fresh folder; under each is what it printed (long output trimmed, marked
`…`). Each step checks its own result: the script stops with exit status 1 at the first that does not
hold, and stops every process it started. `tests/test_walkthrough.py` runs it.

Offline: SQLite, no API key. The model is the agent's own `script.py` ([agents.md](agents.md#scriptpy)).
`loopengine dev`'s offline model streams a script's text itself (a word every 0.03 s); here
`loopengine dev` reaches the script through a local stand-in of the Anthropic Messages API
(`scripts/scripted_messages_api.py`, text in 4-character pieces 0.15 s apart) instead, over the
Anthropic SDK's streaming path, as it would reach Claude. Ports are free ones picked at run time
(`loopengine dev` defaults to 8787, the payment stand-in to 8790); the folder was `{folder}`.
"""


def stop(sh: Shell, walk: Walk) -> None:
    """8. Every server stopped with Ctrl-C, each exiting cleanly."""
    sh.transcript.section(
        "8. Stop", "Ctrl-C to each server (here: SIGINT to each background job, the last first):"
    )
    for started, status in sh.stop_all():
        sh.transcript.command(f"kill -INT %{started.job}   # {started.line}", f"exit status {status}")
        expect(status == 0, f"`{started.line}` exited {status} on Ctrl-C:\n{started.output()[-2000:]}")


def base_env() -> dict[str, str]:
    """The user's environment before the walkthrough: nothing of loopengine's set, no venv active."""
    drop = ("LOOPENGINE_", "ANTHROPIC_", "VIRTUAL_ENV", "PAYMENTS_URL", "ORDERS_TOKEN", "REPO")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    return env


def main(argv: list[str] | None = None) -> int:
    """Run every step; write the page when all held. The exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="the folder to work in (default: a new temporary one)")
    parser.add_argument(
        "--out", type=Path, default=REPO / "docs" / "walkthrough.md", help="the page to write"
    )
    parser.add_argument(
        "--gap", type=float, help="seconds between two streamed text pieces (default: the stand-in's 0.15)"
    )
    args = parser.parse_args(argv)
    folder = (args.dir or Path(tempfile.mkdtemp(prefix="walkthrough-"))).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    transcript = Transcript()
    sh, walk = Shell(folder, base_env(), transcript), Walk(gap=args.gap)

    def terminated(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)  # unwinds through the finally below: every server is stopped

    signal.signal(signal.SIGTERM, terminated)
    step = "?"
    try:
        for run in [*STEPS, stop]:
            step = (run.__doc__ or run.__name__).split(" ", 1)[0] + " " + run.__name__
            run(sh, walk)
    except StepFailed as exc:
        print(f"\nwalkthrough FAILED at step {step}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a command that hung, a reply that was not JSON: still a failed step
        print(f"\nwalkthrough FAILED at step {step}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        sh.stop_all()
    header = HEADER.format(date=datetime.date.today().isoformat(), folder=folder)
    args.out.write_text(transcript.markdown(header))
    print(f"\nwalkthrough done: every step held; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
