"""The new-agent path end to end, with real processes: every printed next step is run as printed.

GIVEN a fresh folder and the environment ``make run`` leaves (the package and its runtime
dependencies, no pytest, no virtualenv activated), WHEN ``loopengine new-agent returns-desk`` runs,
THEN each command it prints works: the agents check, the agent's own tests (as a plain script), the
stand-in payment API, ``loopengine dev`` and the curl line; and a charge approved through the HTTP
API reaches the stand-in once, under the idempotency key an operator computes from the turn's audit.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine import ToolContext
from loopengine.local.agents_cli import commands
from tests.dev_support import free_port

NAME = "returns-desk"
CHARGE = "Charge 12.50 to a@example.com for the broken mug"


def steps(printed: str) -> dict[str, str]:
    """The printed next steps by what they do (comments dropped)."""
    found: dict[str, str] = {}
    joined = printed.split("next:", 1)[1].replace("\\\n", " ")  # a line ending in a backslash goes on
    lines = [line.split("   # ")[0].strip() for line in joined.splitlines()]
    for line in filter(None, lines):
        for what, marker in [
            ("export", "export "),
            ("check", "agents --check"),
            ("test", "test_returns_desk.py"),
            ("payments", "payments_standin.py"),
            ("dev", " dev"),
            ("chat", " chat "),
            ("curl", "curl "),
        ]:
            if marker in line and what not in found:
                found[what] = line
                break
    return found


def shell(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(line, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], dict[str, str]]]:
    """A project folder, the environment of a shell that never activated the venv, the printed steps."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/bin:/bin"  # neither python nor loopengine of the venv on PATH
    made = subprocess.run(
        [sys.executable, "-m", "loopengine.local.cli", "new-agent", NAME],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    printed = steps(made.stdout)
    assert set(printed) == {"export", "check", "test", "payments", "dev", "chat", "curl"}, made.stdout
    name, _, value = printed["export"].removeprefix("export ").partition("=")
    env[name] = value
    yield tmp_path, env, printed


def test_the_printed_check_and_test_commands_work_without_pytest_or_an_activated_venv(
    home: tuple[Path, dict[str, str], dict[str, str]],
) -> None:
    cwd, env, printed = home
    assert printed["test"].startswith(shlex.quote(sys.executable) + " ")  # the venv's python, by path
    checked = shell(printed["check"], cwd, env)
    assert checked.returncode == 0 and checked.stdout.startswith("OK:"), checked
    blocked = cwd / "no-pytest"  # as after `make run`, which installs no pytest
    blocked.mkdir()
    (blocked / "pytest.py").write_text("raise ImportError('pytest is not installed')\n")
    tested = shell(printed["test"], cwd, {**env, "PYTHONPATH": str(blocked)})
    assert tested.returncode == 0, tested.stderr[-3000:]
    assert "Ran 6 tests" in tested.stderr and tested.stderr.rstrip().endswith("OK")


def test_a_charge_through_the_printed_servers_reaches_the_stand_in_once_under_its_key(
    home: tuple[Path, dict[str, str], dict[str, str]],
) -> None:
    cwd, env, printed = home
    standin = subprocess.Popen(
        [*shlex.split(printed["payments"].removesuffix("&")), "--port", "0"],  # 0: no clash in parallel
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    dev: subprocess.Popen[bytes] | None = None
    try:
        assert standin.stdout is not None
        payments = standin.stdout.readline().split()[-1]
        port = free_port()
        dev = subprocess.Popen(  # as printed, on a free port (no admin auth: anonymous, local only)
            [*shlex.split(printed["dev"]), "--port", str(port)],
            cwd=cwd,
            env={**env, "PAYMENTS_URL": payments},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # Ctrl-C works in a bg job
        )
        _wait_for(port)

        if shutil.which("curl"):
            curled = shell(printed["curl"].replace("8787", str(port)), cwd, env)
            assert json.loads(curled.stdout)["status"] == "paused", curled

        status, body = _call(port, "POST", f"/agents/{NAME}/messages", {"message": CHARGE})
        assert status == 202 and body["pendingItems"][0]["tool"] == "charge", body
        item = body["pendingItems"][0]
        assert _charges(payments) == []
        resolve = f"/pending-approvals/{item['pendingId']}/resolve?wait=20"
        status, decided = _call(port, "POST", resolve, {"decision": "approve"})
        assert status == 200 and decided["status"] == "finished", decided
        assert _call(port, "POST", resolve, {"decision": "approve"}) == (200, {"alreadyResolved": True})
        status, turn = _call(port, "GET", f"/turns/{body['turnId']}")
        assert turn["status"] == "finished" and "I charged 12.50 USD" in turn["text"], turn
        [outcome] = [e for e in turn["audit"] if e["type"] == "tool_outcome"]
        key = ToolContext.key_for("", turn["turnId"], outcome["toolUseId"])  # the operator's lookup
        assert outcome["idempotencyKey"] == key
        [charge] = _charges(payments, key)
        assert _charges(payments) == [charge] and charge["amount_cents"] == 1250
    finally:
        if dev is not None:
            dev.send_signal(signal.SIGINT)
            try:
                dev.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(dev.pid, signal.SIGKILL)
                dev.wait()
        standin.terminate()
        standin.wait(10)
        if standin.stdout is not None:
            standin.stdout.close()


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("loopengine dev did not come up")


def _call(port: int, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    """A request as curl sends it: no credentials."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def _charges(url: str, key: str | None = None) -> list[dict[str, Any]]:
    query = f"?idempotency_key={key}" if key else ""
    with urllib.request.urlopen(f"{url}/charges{query}", timeout=10) as reply:
        found: list[dict[str, Any]] = json.loads(reply.read())["charges"]
        return found


def test_the_printed_commands_name_what_this_shell_reaches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv_bin = Path(sys.executable).parent
    assert commands({"PATH": f"{venv_bin}:/usr/bin"}) == ("python", "loopengine")  # an activated venv
    monkeypatch.chdir(tmp_path)
    python, loopengine = commands({"PATH": "/usr/bin:/bin"})
    assert python == shlex.quote(sys.executable) and Path(loopengine).name == "loopengine"
    monkeypatch.chdir(venv_bin.parent.parent)  # e.g. the repository, where `make run` made .venv
    assert commands({"PATH": "/usr/bin:/bin"})[0] == str(Path(sys.executable).relative_to(Path.cwd()))
