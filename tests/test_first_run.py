"""The first run and the daily loop: what `make run` says about its store is true, `make dev PORT=N` works.

The demo's closing lines name the store it wrote and the command that serves it; here that command's
store is served by ``loopengine dev`` (a subprocess, as a user runs it) and a turn the demo printed is
read back over HTTP. The Makefile is checked with ``make -n`` (what it would run, nothing installed).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from loopengine.bootstrap import DEFAULT_DB
from loopengine.local.demo import run_demo, serve_command
from tests.dev_support import DevProcess, free_port, request

ROOT = Path(__file__).resolve().parent.parent


def test_the_store_the_demo_names_is_the_one_dev_serves(tmp_path: Path) -> None:
    db = tmp_path / "my store.db"
    out = io.StringIO()

    assert run_demo(str(db), fresh=True, out=out) == 0, out.getvalue()

    text = out.getvalue()
    command = serve_command(db)
    assert command in text
    assert command == f"LOOPENGINE_DB='{db}' make dev"
    turn_ids = re.findall(r'"turnId": "(trn_[0-9a-f]+)"', text)
    assert turn_ids, text
    env = {**os.environ, "LOOPENGINE_DB": str(db), "LOOPENGINE_ADMIN_AUTH": "admin:secret"}
    env.pop("LOOPENGINE_TABLE", None)
    srv = DevProcess(env, free_port(), log=tmp_path / "dev.log")
    srv.start()
    try:
        status, turn = request(srv.port, "GET", f"/turns/{turn_ids[0]}")
    finally:
        srv.stop()
    assert status == 200, turn
    assert turn["turnId"] == turn_ids[0]
    assert turn["status"] == "finished"


def test_the_default_store_is_served_by_plain_make_dev() -> None:
    assert serve_command(Path(DEFAULT_DB)) == "make dev"
    assert serve_command(Path.cwd() / DEFAULT_DB) == "make dev"
    assert serve_command(Path(DEFAULT_DB + ".other")) != "make dev"


def test_a_second_demo_on_the_same_store_adds_to_it(tmp_path: Path) -> None:
    db = str(tmp_path / "shared.db")
    assert run_demo(db, fresh=True, out=io.StringIO()) == 0
    again = io.StringIO()

    assert run_demo(db, fresh=False, out=again) == 0, again.getvalue()


def _make_n(*args: str) -> str:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        [make, "-n", "-C", str(ROOT), *args], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout


def test_make_dev_listens_on_the_port_given(tmp_path: Path) -> None:
    plan = _make_n("dev", "PORT=9123", f"VENV={tmp_path / 'venv'}")

    assert re.search(r"loopengine dev --port 9123$", plan, re.MULTILINE), plan


def test_make_run_and_make_dev_use_one_store(tmp_path: Path) -> None:
    venv = f"VENV={tmp_path / 'venv'}"
    run = [line for line in _make_n("run", venv).splitlines() if "loopengine demo" in line]
    dev = [line for line in _make_n("dev", venv).splitlines() if "loopengine dev" in line]

    assert len(run) == len(dev) == 1, (run, dev)
    store = "LOOPENGINE_DB=${LOOPENGINE_DB:-" + DEFAULT_DB + "}"
    assert run[0].startswith(store), run
    assert dev[0].startswith(store), dev
    assert "--fresh" not in run[0], "the demo must not wipe the store make dev serves"


def test_make_run_installs_only_the_runtime_dependencies(tmp_path: Path) -> None:
    plan = _make_n("run", f"VENV={tmp_path / 'venv'}")

    assert re.search(r"pip sync --python \S+ --require-hashes src/requirements.txt$", plan, re.M), plan
    assert "requirements-dev.txt" not in plan and "[dev]" not in plan
    assert "--quiet" not in plan
