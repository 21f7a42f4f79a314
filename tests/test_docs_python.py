"""docs/python.md runs as pasted: every ```python block, in order, in one interpreter, offline.

GIVEN a fresh clone's environment (no model key, no loopengine settings: the offline scripted model)
and an empty temporary working directory, WHEN every ```python block of docs/python.md is pasted, in
order, into one file and that file runs, THEN it exits 0 with no traceback or warning, and writes
nothing outside that directory. What it writes is watched from inside the interpreter: an audit hook
(``sys.addaudithook``, installed before the page's code runs and reporting at the very end of exit)
sees every file opened for writing, every folder made, every rename and removal, every SQLite database
opened and every child process, wherever in the page's code or the library they happen, and refuses
those outside the directory (so a failing run writes nothing there either). ``HOME`` and
``TMPDIR`` point into the directory (what a library puts there counts as the page's own), and the
interpreter writes no bytecode (``-B``: Python's cache, not the page's doing).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.dev_support import DevProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "python.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)

WATCH = """\
import atexit, os, runpy, sys

HERE = os.path.realpath(os.getcwd())
WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
PATHS = {"os.mkdir": 1, "os.rename": 2, "os.remove": 1, "os.rmdir": 1, "os.truncate": 1,
         "os.link": 2, "os.symlink": 2, "sqlite3.connect": 1}
outside = []


def inside(path):
    if isinstance(path, int) or path in (None, "", ":memory:", b"", os.devnull):
        return True
    path = os.fsdecode(path).removeprefix("file:").split("?")[0]
    return os.path.realpath(path) == HERE or os.path.realpath(path).startswith(HERE + os.sep)


def refuse(what):
    outside.append(what)
    raise PermissionError(f"the docs test refuses {what}: outside the working directory")


def hook(event, args):
    if event == "open":
        path, mode, flags = args
        writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & WRITING)
        if writing and not inside(path):
            refuse(f"{event} {path!r}")
    elif event in PATHS:
        for path in args[: PATHS[event]]:
            if not inside(path):
                refuse(f"{event} {path!r}")
    elif event in ("subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.fork"):
        if not finding_a_library():
            refuse(f"{event} {args!r:.200}")


def finding_a_library():
    # ctypes.util.find_library asks ldconfig (or the compiler) where a library is: a read, not a
    # write (trio, which httpx may load, looks for pthread this way)
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.replace(os.sep, "/").endswith("ctypes/util.py"):
            return True
        frame = frame.f_back
    return False


def report():
    if outside:
        print("WRITTEN OUTSIDE THE DIRECTORY:", *sorted(set(outside)), sep="\\n  ", file=sys.stderr)
        sys.stderr.flush()
        os._exit(3)


atexit.register(report)  # the first registered runs last: after the library's own exit handlers
sys.addaudithook(hook)
runpy.run_path(sys.argv[1], run_name="__main__")
"""


def blocks() -> list[str]:
    return BLOCK.findall(PAGE.read_text())


def test_every_python_block_of_the_page_runs_in_order_as_pasted(tmp_path: Path) -> None:
    code = blocks()
    assert len(code) >= 6, "the page's python blocks"
    work = tmp_path / "work"
    (work / "home").mkdir(parents=True)
    (work / "tmp").mkdir()
    (work / "pasted.py").write_text("\n\n".join(code))
    (tmp_path / "watch.py").write_text(WATCH)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}
    env.update(HOME=str(work / "home"), TMPDIR=str(work / "tmp"), PYTHONWARNINGS="default")
    # the client's block talks to `LOOPENGINE_ADMIN_AUTH=admin:secret make dev`, as the page says: a
    # real `loopengine dev` of its own (outside the watched process), its store in the test's directory
    # (the machine's TMPDIR: the forkserver's socket path must stay short)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPENGINE_", "ANTHROPIC_"))}
    served = {**clean, "LOOPENGINE_ADMIN_AUTH": "admin:secret", "LOOPENGINE_DB": str(tmp_path / "dev.db")}
    server = DevProcess(served, free_port(), log=tmp_path / "dev.log")
    server.start()
    try:
        done = subprocess.run(
            [sys.executable, "-B", str(tmp_path / "watch.py"), "pasted.py"],
            cwd=work,
            env={**env, "LOOPENGINE_PUBLIC_URL": f"http://127.0.0.1:{server.port}"},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-3000:] + server.log_text()[-3000:]
    assert done.stderr == "", done.stderr[-3000:]


def test_the_watch_sees_a_write_outside_the_directory(tmp_path: Path) -> None:
    """The audit hook is not blind: a page whose block wrote beside its directory would fail."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "pasted.py").write_text(
        "import contextlib, os, sqlite3\n"
        "with contextlib.suppress(PermissionError):\n    open('../beside.txt', 'w')\n"
        "with contextlib.suppress(PermissionError):\n    sqlite3.connect('../beside.db')\n"
        "with contextlib.suppress(PermissionError):\n    os.makedirs('../beside/deeper')\n"
        "open('inside.txt', 'w').close()\n"
    )
    (tmp_path / "watch.py").write_text(WATCH)
    done = subprocess.run(
        [sys.executable, "-B", str(tmp_path / "watch.py"), "pasted.py"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert "open '../beside.txt'" in done.stderr and "sqlite3.connect '../beside.db'" in done.stderr
    assert "os.mkdir '../beside'" in done.stderr  # refused: nothing was made beside the directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["watch.py", "work"]
    assert (work / "inside.txt").exists()
