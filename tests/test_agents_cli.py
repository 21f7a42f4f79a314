"""``loopengine agents [--check]`` and ``loopengine new-agent``, run as a user runs them (subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.agent_folders import RULES_YAML, write_agent


def cli(tmp_path: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOOPENGINE_AGENTS_PATH": path if path is not None else str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "loopengine.local.cli", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )


def test_check_passes_on_valid_agents(tmp_path: Path) -> None:
    write_agent(tmp_path, "shop")
    done = cli(tmp_path, "agents", "--check")
    assert done.returncode == 0
    assert done.stdout == "OK: 2 agent(s) valid (customer-service, shop)\n"


def test_check_prints_file_line_errors_and_exits_1(tmp_path: Path) -> None:
    write_agent(
        tmp_path,
        "shop",
        rules=RULES_YAML.replace("decision: ask\ndefault", "decision: ask\n    approver: [x]\ndefault"),
    )
    write_agent(tmp_path, "desk", tools="raise RuntimeError('boom')\n")
    write_agent(tmp_path, "fine")
    done = cli(tmp_path, "agents", "--check")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "desk/tools.py:1: cannot import: RuntimeError: boom",
        "shop/rules.yaml:4: rules[0].approver: unknown key (did you mean 'approvers'?)",
    ]
    assert "2 problem(s) in 2 of 4 agent(s)" in done.stderr and "Traceback" not in done.stderr


def test_check_reports_a_missing_agents_path_folder(tmp_path: Path) -> None:
    done = cli(tmp_path, "agents", "--check", path=str(tmp_path / "nowhere"))
    assert (
        done.returncode == 1 and "LOOPENGINE_AGENTS_PATH:" in done.stdout and "is not a folder" in done.stdout
    )


def test_listing_marks_a_broken_agent_without_a_traceback(tmp_path: Path) -> None:
    write_agent(tmp_path, "shop", agent="name: shop\nmodel: [\n")
    write_agent(tmp_path, "desk")
    done = cli(tmp_path, "agents")
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["customer-service", "desk", "shop"]
    assert "BROKEN: shop/agent.yaml:3: YAML syntax error" in lines[2]
    assert "BROKEN" not in lines[0] + lines[1]


def test_new_agent_refuses_bad_names_and_taken_names(tmp_path: Path) -> None:
    bad = cli(tmp_path, "new-agent", "../escape", "--dir", str(tmp_path))
    assert bad.returncode != 0 and "is not an agent name" in bad.stderr
    assert not (tmp_path.parent / "escape").exists()
    taken = cli(tmp_path, "new-agent", "customer-service", "--dir", str(tmp_path))
    assert taken.returncode == 1 and "already exists" in taken.stderr
    assert list(tmp_path.iterdir()) == []


def test_new_agent_outside_the_agents_path_says_how_to_load_it(tmp_path: Path) -> None:
    made = cli(tmp_path, "new-agent", "returns-desk", path="")
    assert made.returncode == 0
    assert f"export LOOPENGINE_AGENTS_PATH={tmp_path.resolve() / 'agents'}" in made.stdout
    assert (tmp_path / "agents" / "returns_desk" / "agent.yaml").is_file()
    check = cli(tmp_path, "agents", "--check", path=str(tmp_path / "agents"))
    assert check.returncode == 0, check.stdout
