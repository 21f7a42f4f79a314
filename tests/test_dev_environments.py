"""``loopengine dev``'s environments start forked from one process that loaded what they share.

GIVEN the forkserver's preload (:mod:`loopengine.local.dev_warm`), WHEN it is imported in a fresh
interpreter, THEN the api handler's modules and the routes' first-use code are loaded, the
Anthropic SDK exactly when turns here call Anthropic, never boto3 (the local store is SQLite), and
the collector is frozen over them; a warm-up step that fails is skipped and named, never raised
(the forkserver would stop starting environments); and the environments a real ``loopengine dev``
starts are processes forked from that preloaded server, which serve requests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loopengine.local import dev
from tests.dev_support import DevProcess, admin_env, free_port, request

PROBE = """
import gc, json, sys
import loopengine.local.dev_warm as warm
from loopengine.http import root
from loopengine.http.functions import preload
print(json.dumps({"failed": warm.FAILED, "sdk": "anthropic" in sys.modules,
                  "api": all(m in sys.modules for m in ("loopengine.http.api", *preload.API_ON_FIRST_USE)),
                  "boto3": "boto3" in sys.modules, "frozen": gc.get_freeze_count() > 10_000,
                  "engine": root._engine is not None or root._registry is not None}))
"""


def _warm(**env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_the_preload_loads_the_handler_and_the_sdk_only_when_turns_call_anthropic() -> None:
    # and no engine, store or agent registry: nothing that holds a connection crosses the fork
    expected = {"failed": [], "sdk": True, "api": True, "boto3": False, "frozen": True, "engine": False}
    assert _warm(ANTHROPIC_API_KEY="sk-never-sent") == expected
    assert _warm(ANTHROPIC_API_KEY="sk-never-sent", LOOPENGINE_MODEL="scripted")["sdk"] is False
    assert _warm() == {**expected, "sdk": False}


def test_a_failing_warm_up_step_is_named_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from loopengine.local import dev_warm

    def broken() -> None:
        raise RuntimeError("no")

    monkeypatch.setattr(dev_warm, "_STEPS", (("handler", dev_warm._handler), ("broken", broken)))
    assert dev_warm.warm() == ["broken"]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_dev_forks_its_environments_from_the_preloaded_server(tmp_path: Path) -> None:
    assert dev.start_method() == "forkserver"
    server = DevProcess(admin_env(tmp_path / "db.sqlite"), free_port())
    server.start()
    try:
        message = {"message": "Order A-1001 arrived broken."}
        status, _ = request(server.port, "POST", "/agents/customer-service/messages", message)
        assert status in (200, 202)
        assert server.proc is not None
        children = {pid: _cmdline(pid) for pid in _children(server.proc.pid)}
        assert not [c for c in children.values() if "spawn_main" in c], children  # none spawned
        (forkserver,) = [pid for pid, line in children.items() if "forkserver" in line]
        environments = _children(forkserver)
        # --workers 2 (and a spare, when both were busy at once), each forked: no command line of its own
        assert len(environments) >= 2
        assert all(_cmdline(pid) == _cmdline(forkserver) for pid in environments)
    finally:
        server.stop()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")


def test_ctrl_c_stops_dev_even_when_it_was_started_with_sigint_ignored(tmp_path: Path) -> None:
    """``loopengine dev &`` in a script starts it with SIGINT ignored; ``kill -INT`` must still stop it."""
    env = admin_env(tmp_path / "db.sqlite")
    server = DevProcess(env, free_port(), args=("--workers", "1"), sigint_ignored=True)
    server.start()
    try:
        assert server.proc is not None
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(20) == 0
    finally:
        server.kill()


def test_a_temporary_directory_too_long_for_a_socket_starts_environments_spawned(tmp_path: Path) -> None:
    """The forkserver listens on a unix socket under ``TMPDIR``; where that path would pass the
    platform's limit (``AF_UNIX path too long``), environments are spawned instead, and serve."""
    long_tmp = tmp_path / ("t" * (120 - len(str(tmp_path))))
    long_tmp.mkdir()
    server = DevProcess({**admin_env(tmp_path / "db.sqlite"), "TMPDIR": str(long_tmp)}, free_port())
    server.start()
    try:
        message = {"message": "Order A-1001 arrived broken."}
        status, body = request(server.port, "POST", "/agents/customer-service/messages", message)
        assert status in (200, 202), body
    finally:
        server.stop()
    assert "AF_UNIX" not in server.log_text()
