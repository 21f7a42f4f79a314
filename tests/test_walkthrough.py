"""The walkthrough of issue 17 (scripts/walkthrough.py), run for real: every step in its transcript.

GIVEN a fresh folder, WHEN scripts/walkthrough.py runs (new-agent, the payment stand-in, an MCP server
behind an approval rule, ``loopengine dev``, ``loopengine chat`` on a pseudo-terminal, the charge found
by its idempotency key, examples/embed.py), THEN it exits 0 and the page it writes holds every step with
its evidence, in order, and nothing it started is still listening. A step that fails stops it with exit
status 1, a message naming the step and no page; a SIGTERM midway stops every server it had started.
The committed docs/walkthrough.md has the sections a run writes.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow(seconds=30)

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "walkthrough.py"
GAP = 0.08
"""Seconds between streamed pieces here (the page's run uses the stand-in's 0.15): still several reads.

At 0.04 the first reply fits in one 0.25 s coalescing window and leaves no stored ``text:delta``."""
PAGE = ROOT / "docs" / "walkthrough.md"
SERVED = re.compile(r"(?:stand-in on|MCP server on|loopengine dev:) http://127\.0\.0\.1:(\d+)")
"""The lines saying where a server it started listens."""

EVIDENCE = [  # in the order the page must show them
    r"^Produced by `scripts/walkthrough\.py` on \d{4}-\d\d-\d\d ",
    r"^## 1\. Scaffold an agent$",
    r"^\$ loopengine new-agent returns-desk\ncreated agents/returns_desk/",
    r"^OK: \d+ agent\(s\) valid \(.*returns-desk",
    r"^Ran \d+ tests in .*\n\nOK$",
    r"^## 2\. ",
    r"^payments stand-in on http://127\.0\.0\.1:\d+$",
    r'^\{"charges": \[\]\}$',
    r"^## 3\. ",
    r"^orders MCP server on http://127\.0\.0\.1:\d+/mcp",
    r"# without the token\n401$",
    r"^\+mcp_servers:\n\+  - name: orders ",
    r"^\+  - tool: orders_refund\n\+    decision: ask$",
    r"^## 4\. ",
    r"^loopengine dev: http://127\.0\.0\.1:\d+ ",
    r'^\{"status": "ok"\}$',
    r"^## 5\. ",
    r"^you> Charge 12\.50 to a@example\.com for the broken mug\n  \? charge needs approval: ",
    r"^  \[a\]pprove, \[d\]eny, \[e\]dit arguments > a\n    recorded\n  \[tool\] charge: ok$",
    r"^agent> I charged 12\.50 USD \(ch_\w+\)\.$",
    r"^  \[tool\] orders_lookup: ok\n  \? orders_refund needs approval: ",
    r"^  \[tool\] orders_refund: ok\nagent> I refunded 12\.50 on order A-1001 ",
    r"^Each reply was printed as it streamed: the terminal received them in \d+ pieces over ",
    r"^## 6\. ",
    r'^\{"type": "tool_outcome", .*"tool": "charge", "outcome": "ok", "idempotencyKey": "le_[0-9a-f]{40}"\}$',
    r"^le_[0-9a-f]{40}$",  # the key computed from the ids
    r'^\["I[^"]*", "[^"]*"',  # the turn's stored text:delta pieces: two at least, from the reply's start
    r"^lookup A-1001\nrefund A-1001 1250 usd: ",
    r"^## 7\. ",
    r"^pending: charge \{'customer': 'b@example\.com', 'amount_cents': 3000, ",
    r"^  agent: I charged 30\.00 USD \(ch_\w+\)\.  \(\d+ pieces\)$",
    r"^plugged store: turn finished; ",
    r"^1250 le_[0-9a-f]{40} user:anonymous\n3000 le_[0-9a-f]{40} user:ops@example\.com$",
    r"^## 8\. Stop",
]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}


def _walk(folder: Path, out: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run the walkthrough; past ``timeout`` stop it as a user would (SIGTERM: it stops its servers)."""
    args = [sys.executable, str(SCRIPT), "--dir", str(folder), "--out", str(out), "--gap", str(GAP)]
    with subprocess.Popen(
        args, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            stdout, stderr = proc.communicate(timeout=30)
            pytest.fail(f"the walkthrough took over {timeout} s:\n{stdout[-4000:]}{stderr[-4000:]}")
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _headings(page: str) -> list[str]:
    return re.findall(r"^## .+$", page, re.M)


def test_the_walkthrough_runs_end_to_end_and_its_page_holds_every_step(tmp_path: Path) -> None:
    out = tmp_path / "walkthrough.md"
    done = _walk(tmp_path / "shop", out, 420)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    page = out.read_text()
    at = 0
    for pattern in EVIDENCE:
        found = re.compile(pattern, re.M).search(page, at)
        assert found is not None, f"{pattern!r} not in the page after offset {at}:\n{page[at : at + 3000]}"
        at = found.end()
    key = re.search(r'"idempotencyKey": "(le_[0-9a-f]{40})"', page)
    assert key is not None and page.count(key.group(1)) >= 5  # listed, audited, computed, looked up, listed
    assert page.count("exit status 0") == 4 and "Traceback" not in page
    served = {int(p) for p in SERVED.findall(page)}
    assert len(served) == 4  # the payment stand-in, the MCP server, the Messages API stand-in, loopengine dev
    for port in served:
        assert not _listening(port), f"something still listens on {port} after the walkthrough"
    assert _headings(page) == _headings(PAGE.read_text()), "docs/walkthrough.md is not what a run writes"


def test_a_step_that_fails_stops_it_with_a_message_and_no_page(tmp_path: Path) -> None:
    taken = tmp_path / "shop" / "agents" / "returns_desk"
    taken.mkdir(parents=True)
    (taken / "agent.yaml").write_text("name: mine\n")  # new-agent refuses to overwrite a folder
    out = tmp_path / "walkthrough.md"
    done = _walk(tmp_path / "shop", out, 120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "walkthrough FAILED at step 1. scaffold: `loopengine new-agent returns-desk` exited" in done.stderr
    assert not out.exists()
    assert (taken / "agent.yaml").read_text() == "name: mine\n"


def test_stopped_midway_it_stops_every_server_it_started(tmp_path: Path) -> None:
    out = tmp_path / "walkthrough.md"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--dir", str(tmp_path / "shop"), "--out", str(out)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    seen, ports = "", set()
    deadline = time.monotonic() + 180
    try:
        while not re.search(r"MCP server on http://127\.0\.0\.1:\d+", seen):
            assert time.monotonic() < deadline and proc.poll() is None, seen
            seen += proc.stdout.readline()
        ports = {int(p) for p in SERVED.findall(seen)}
        assert len(ports) == 2 and all(_listening(p) for p in ports)  # the payment stand-in, the MCP server
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:  # the test failed first: let it stop its servers, then make sure
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
        assert proc.stderr is not None
        proc.stderr.close()
    assert not any(_listening(p) for p in ports), "a server the walkthrough started outlived it"
    assert not out.exists()
