"""A broken agent answers 503 with file:line, every other agent keeps working, and edits are seen at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loopengine.app.invokers import InlineInvoker
from loopengine.authoring.registry import AgentRegistry
from loopengine.domain.base.errors import AgentUnavailable
from loopengine.http import api
from tests.agent_folders import AGENT_YAML, RULES_YAML, TOOLS_PY, calls, write_agent
from tests.handler_support import InstallRoot, call, load_event, with_body

ALLOW_ALL = "rules: []\ndefault_decision: allow\n"


def post(agent: str, message: str = "Order A-1001 arrived broken.") -> tuple[int, dict[str, Any]]:
    event = with_body(load_event("post_message"), {"message": message})
    event["rawPath"] = event["requestContext"]["http"]["path"] = f"/agents/{agent}/messages"
    return call(api.handler, event)


@pytest.mark.parametrize(
    ("files", "where"),
    [
        ({"agent": "name: shop\nmodel: [oops\n"}, "shop/agent.yaml:3: YAML syntax error"),
        (
            {
                "rules": RULES_YAML.replace(
                    "decision: ask\ndefault", "decision: ask\n    approver: [x]\ndefault"
                )
            },
            "shop/rules.yaml:4: rules[0].approver: unknown key",
        ),
        (
            {"tools": "import os\nraise ImportError('no driver')\n"},
            "shop/tools.py:2: cannot import: ImportError: no driver",
        ),
        ({"tools": "TOOLZ = []\n"}, "shop/tools.py:1: defines no TOOLS list"),
    ],
)
def test_a_broken_agent_answers_503_and_the_others_keep_working(
    install_root: InstallRoot, tmp_path: Path, files: dict[str, str], where: str
) -> None:
    extra = tmp_path / "extra"
    write_agent(extra, "shop", **files)
    write_agent(extra, "desk", rules=ALLOW_ALL)
    install_root(lambda engine: InlineInvoker(engine.resume), LOOPENGINE_AGENTS_PATH=str(extra))

    status, body = post("shop")
    assert status == 503 and body["error"] == "agent_unavailable", body
    assert where in str(body["message"]) and "Traceback" not in str(body["message"])

    status, body = post("customer-service")
    assert status == 202 and body["status"] == "paused"
    status, body = post("desk")
    assert (status, body["status"], body["text"]) == (200, "finished", "all done")


def test_fixing_a_broken_agent_needs_no_restart(install_root: InstallRoot, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    folder = write_agent(extra, "shop", tools="raise RuntimeError('not yet')\n", rules="rules: [\n")
    install_root(lambda engine: InlineInvoker(engine.resume), LOOPENGINE_AGENTS_PATH=str(extra))
    status, body = post("shop")
    assert status == 503 and "rules.yaml:2" in str(body["message"]) and "tools.py:1" in str(body["message"])

    (folder / "tools.py").write_text(TOOLS_PY)
    (folder / "rules.yaml").write_text(ALLOW_ALL)

    status, body = post("shop")
    assert (status, body["status"]) == (200, "finished")
    assert calls(folder) == [1, 2]


def test_edits_reach_the_next_turn_in_the_same_process(install_root: InstallRoot, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    folder = write_agent(extra, "shop")
    install_root(lambda engine: InlineInvoker(engine.resume), LOOPENGINE_AGENTS_PATH=str(extra))
    assert post("shop")[0] == 202
    (folder / "rules.yaml").write_text(ALLOW_ALL)  # same process, no restart
    assert post("shop")[0] == 200
    (folder / "rules.yaml").write_text(RULES_YAML.replace("decision: ask\n", "decision: deny\n", 1))
    assert post("shop")[1]["stopReason"] == "denied"
    (folder / "agent.yaml").write_text(AGENT_YAML.format(name="renamed"))
    assert post("shop")[0] == 404 and post("renamed")[0] == 200


def test_the_registry_notices_an_edit_of_the_same_size_at_once(tmp_path: Path) -> None:
    """Content, not mtime, decides: a same-length edit within one clock tick is still seen."""
    folder = write_agent(tmp_path, "shop", rules=RULES_YAML.replace("ask", "asK", 1))
    registry = AgentRegistry(package=None, paths=[tmp_path])
    with pytest.raises(AgentUnavailable):
        registry.get("shop")
    stat = (folder / "rules.yaml").stat()
    (folder / "rules.yaml").write_text(RULES_YAML.replace("decision: ask", "decision: ask", 1))
    os.utime(folder / "rules.yaml", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert registry.get("shop").rules.default_decision.value == "ask"


def test_a_scaffolded_agent_runs_offline_through_the_api(install_root: InstallRoot, tmp_path: Path) -> None:
    extra = tmp_path / "mine"
    cli = [sys.executable, "-m", "loopengine.local.cli"]
    env = {**os.environ, "LOOPENGINE_AGENTS_PATH": str(extra)}
    made = subprocess.run(
        [*cli, "new-agent", "returns-desk", "--dir", str(extra)], env=env, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    assert (
        "loopengine chat returns-desk" in made.stdout and "returns_desk/test_returns_desk.py" in made.stdout
    )
    again = subprocess.run(
        [*cli, "new-agent", "returns-desk", "--dir", str(extra)], env=env, capture_output=True, text=True
    )
    assert again.returncode != 0 and "already exists" in again.stderr
    checked = subprocess.run([*cli, "agents", "--check"], env=env, capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout.startswith("OK: 2 agent(s) valid"), checked
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", str(extra)], capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout

    engine = install_root(lambda engine: InlineInvoker(engine.resume), LOOPENGINE_AGENTS_PATH=str(extra))
    status, body = post("returns-desk", "printer low on toner")
    assert (status, body["status"]) == (200, "finished") and "opened ticket" in str(body["text"])
    status, body = post("returns-desk", "Urgent: the shop is down")
    assert (status, body["status"]) == (202, "paused")
    [item] = body["pendingItems"]
    resolve = with_body(load_event("resolve_approve", pendingId=item["pendingId"]), {"decision": "approve"})
    status, _ = call(api.handler, resolve)
    assert status in (200, 202)
    done = engine.outcome(str(body["turnId"]))
    assert (
        done.status.value == "finished"
        and "opened ticket" in (done.text or "")
        and "high" in (done.text or "")
    )

    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "returns_desk"],
        cwd=extra,
        env=env,
        capture_output=True,
        text=True,
    )
    assert tested.returncode == 0, tested.stdout[-2000:]
