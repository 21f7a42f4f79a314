"""The wheel installs only the library: no top-level ``handlers`` or ``agents`` in a user's environment.

``src/handlers`` (the Lambda shims the SAM template names) and ``src/agents`` (the example agents)
ship in the SAM ``CodeUri`` (``src/``); the HTTP app they call is part of the library
(:mod:`loopengine.http`), so ``loopengine dev`` imports nothing outside it.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.wheel_support import built_wheel

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_wheel_holds_only_the_loopengine_package(tmp_path_factory: pytest.TempPathFactory) -> None:
    names = zipfile.ZipFile(built_wheel(tmp_path_factory)).namelist()  # from all of src/: handlers, agents
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert top == {"loopengine"}, top
    assert "loopengine/http/api.py" in names and "loopengine/local/dev.py" in names


def test_the_library_never_imports_the_lambda_shims_or_the_example_agents() -> None:
    offenders = []
    for path in (ROOT / "src" / "loopengine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("handlers", "agents")]
    assert offenders == []


def test_the_lambda_shims_are_the_librarys_handlers() -> None:
    import handlers.api
    import handlers.resume
    import handlers.schedule
    import loopengine.http.api
    import loopengine.http.functions.resume
    import loopengine.http.functions.schedule

    assert handlers.api.handler is loopengine.http.api.handler
    assert handlers.resume.handler is loopengine.http.functions.resume.handler
    assert handlers.schedule.handler is loopengine.http.functions.schedule.handler


# ----------------------------------------------------------------------------------------- the locks

GEN = ROOT / "scripts" / "gen_requirements.py"
LOCKS = ("src/requirements.txt", "requirements-dev.txt", "requirements-uv.txt")
LAMBDA_PLATFORMS = ("x86_64-manylinux_2_17", "aarch64-manylinux_2_17")


def _project_copy(tmp: Path) -> Path:
    (tmp / "src").mkdir()
    for rel in ("pyproject.toml", *LOCKS):
        shutil.copyfile(ROOT / rel, tmp / rel)
    return tmp


def _check(root: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(GEN), "--check", "--root", str(root)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_a_copy_of_the_project_checks_current(tmp_path: Path) -> None:
    result = _check(_project_copy(tmp_path))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("old", "new", "stale"),
    [
        ('"boto3>=1.34",', '"boto3>=1.34",\n  "rich>=13",', ["src/requirements.txt", "requirements-dev.txt"]),
        ('"boto3>=1.34",', '"boto3>=99",', ["src/requirements.txt", "requirements-dev.txt"]),
        ('"pytest-xdist>=3.5",', '"pytest-xdist>=3.5",\n  "tox",', ["requirements-dev.txt"]),
        ('requires-python = ">=3.11"', 'requires-python = ">=3.12"', list(LOCKS)),
    ],
    ids=["a-new-dependency", "a-tighter-range", "a-new-dev-tool", "another-python"],
)
def test_check_fails_when_pyproject_moved_since_the_lock(
    tmp_path: Path, old: str, new: str, stale: list[str]
) -> None:
    root = _project_copy(tmp_path)
    _edit(root / "pyproject.toml", old, new)
    result = _check(root)
    assert result.returncode == 1
    for rel in stale:
        assert f"{rel} is stale" in result.stderr, result.stderr
    for rel in set(LOCKS) - set(stale):
        assert f"{rel} is stale" not in result.stderr, result.stderr
    assert "make lock" in result.stderr


def _pin_line(rel: str, name: str) -> str:
    (line,) = [line for line in (ROOT / rel).read_text().splitlines() if line.startswith(f"{name}==")]
    return line


@pytest.mark.parametrize(
    ("rel", "tamper", "expect"),
    [
        # a version outside pyproject's range (the inputs digest alone would not see it)
        (
            "src/requirements.txt",
            lambda t: re.sub(r"aws-lambda-powertools==\S+", "aws-lambda-powertools==3.19.0", t),
            "pins aws-lambda-powertools==3.19.0, outside",
        ),
        (
            "requirements-dev.txt",
            lambda t: re.sub(r"(?m)^boto3==\S+", "boto3==1.34.0", t),
            "CI would test other versions than a deployment gets",
        ),
        (
            "src/requirements.txt",
            lambda t: re.sub(r"(?m)^(six==\S+) \\\n(\s+--hash=\S+ \\\n)*\s+--hash=\S+", r"\1", t),
            "six==1.17.0 has no hash",
        ),
        (
            "src/requirements.txt",
            lambda t: "--extra-index-url https://mirror.invalid/simple\n" + t,
            "names an index",
        ),
        ("requirements-uv.txt", lambda t: t + "uv>=0.9\n", "not a pinned requirement"),
    ],
    ids=["out-of-range", "dev-disagrees", "unhashed", "an-index", "unpinned"],
)
def test_check_fails_on_a_tampered_lock(tmp_path: Path, rel: str, tamper: Any, expect: str) -> None:
    root = _project_copy(tmp_path)
    (root / rel).write_text(tamper((root / rel).read_text()))
    assert (root / rel).read_text() != (ROOT / rel).read_text()
    result = _check(root)
    assert result.returncode == 1 and expect in result.stderr, result.stderr


def test_check_fails_when_a_lock_is_missing(tmp_path: Path) -> None:
    root = _project_copy(tmp_path)
    (root / "requirements-dev.txt").unlink()
    result = _check(root)
    assert result.returncode == 1 and "requirements-dev.txt is missing" in result.stderr


def test_the_runtime_lock_pins_every_dependency_the_team_uses() -> None:
    pinned = {
        line.split("==")[0]
        for line in (ROOT / "src/requirements.txt").read_text().splitlines()
        if "==" in line
    }
    assert {"redis", "jinja2", "mcp", "cryptography", "aws-lambda-powertools", "boto3", "pydantic"} <= pinned
    dev_only = {"pytest", "moto", "mypy", "ruff", "hypothesis"}
    assert not dev_only & pinned, "a dev tool in what `sam build` ships"


def _lambda_install(lock: Path, platform: str, target: Path) -> subprocess.CompletedProcess[str]:
    """Install ``lock`` as `sam build` does for a function: Linux wheels for CPython 3.12, hash-checked."""
    uv = ROOT / ".venv" / ".uv" / "bin" / "uv"
    if uv.exists():
        command = [
            str(uv),
            "pip",
            "install",
            "--quiet",
            "--target",
            str(target),
            "--python-platform",
            platform,
        ]
        command += ["--python-version", "3.12", "--only-binary", ":all:", "--no-deps", "--require-hashes"]
    else:  # installed with INSTALLER=pip: pip download does the same, slower
        tag = "manylinux2014_" + platform.split("-")[0]
        command = [sys.executable, "-m", "pip", "download", "-q", "-d", str(target), "--platform", tag]
        command += ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312"]
        command += ["--only-binary=:all:", "--no-deps", "--require-hashes"]
    return subprocess.run([*command, "-r", str(lock)], capture_output=True, text=True, check=False)


def _python312() -> str | None:
    candidates = [
        shutil.which("python3.12"),
        *sorted(map(str, Path("/root/.pyenv/versions").glob("3.12*/bin/python3.12"))),
    ]
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
        )
        if probe.returncode == 0 and probe.stdout.strip() == "(3, 12)":
            return candidate
    return None


@pytest.mark.parametrize("platform", LAMBDA_PLATFORMS)
def test_the_runtime_lock_installs_for_lambda_python312(tmp_path: Path, platform: str) -> None:
    result = _lambda_install(ROOT / "src" / "requirements.txt", platform, tmp_path / "package")
    assert result.returncode == 0, result.stderr[-2000:]
    arch = platform.split("-")[0]
    assert list((tmp_path / "package").rglob(f"*cpython-312-{arch}-linux-gnu.so")) or list(
        (tmp_path / "package").glob(f"*manylinux*{arch}.whl")
    ), "no native code for Lambda's CPU"
    python = _python312()
    if arch != "x86_64" or python is None or os.uname().machine != "x86_64":
        return  # the package cannot be imported here; it was installed, hashes checked
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": f"{tmp_path / 'package'}:{ROOT / 'src'}"}
    imported = subprocess.run(
        [python, "-c", "import handlers.api, handlers.resume, handlers.schedule"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr[-2000:]  # the runtime lock alone runs the handlers


def test_the_lambda_install_refuses_a_file_whose_hash_is_not_in_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.txt"
    text = (ROOT / "src" / "requirements.txt").read_text()
    lock.write_text(
        re.sub(r"(?m)(^six==.*(?:\n\s+--hash=.*)+)", lambda m: re.sub(r"[0-9a-f]{64}", "0" * 64, m[1]), text)
    )
    assert lock.read_text() != text
    result = _lambda_install(lock, LAMBDA_PLATFORMS[0], tmp_path / "package")
    assert result.returncode != 0 and "six" in result.stderr.lower(), result.stderr[-2000:]


# ------------------------------------------------------------------------------------- the Makefile

MAKE = shutil.which("make") or "make"


def _make(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    outer = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")  # flags of a make that runs pytest are not for this one
    env = {k: v for k, v in os.environ.items() if k not in outer} if path is None else {"PATH": path}
    return subprocess.run(
        [MAKE, "-C", str(ROOT), *args], capture_output=True, text=True, env=env, check=False
    )


def _installs(dry_run: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", dry_run)  # a command continued over lines is one command
    return [line for line in joined.splitlines() if re.search(r"pip (install|sync)|pip download", line)]


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_fresh_clone_installs_only_from_the_locks(tmp_path: Path, installer: str) -> None:
    venv = tmp_path / "venv"  # a fresh .venv: `make -n` prints what a first `make run` / `make test` runs
    run = _make("-n", "run", f"VENV={venv}", f"INSTALLER={installer}")
    test = _make("-n", f"{venv}/.installed", f"VENV={venv}", f"INSTALLER={installer}")
    assert run.returncode == 0 and test.returncode == 0, run.stderr + test.stderr
    for line in _installs(run.stdout) + _installs(test.stdout):
        from_lock = "--require-hashes" in line and re.search(r"requirements(-dev|-uv)?\.txt", line)
        assert from_lock or ("--no-deps" in line and line.endswith("-e .")), line
    run_locks = " ".join(_installs(run.stdout))
    assert (
        "src/requirements.txt" in run_locks and "requirements-dev.txt" not in run_locks
    )  # make run: runtime
    assert "requirements-dev.txt" in " ".join(_installs(test.stdout))  # make test: the dev lock
    assert ("requirements-uv.txt" in run_locks) == (installer == "uv")


def test_make_test_lints_and_runs_the_fast_tests_before_it_builds_the_sam_cli_environment(
    tmp_path: Path,
) -> None:
    venv, sam = tmp_path / "venv", tmp_path / "venv-sam"  # a fresh clone: nothing built yet
    dry = _make("-n", "test", f"VENV={venv}", f"SAM_VENV={sam}")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()

    def first(pattern: str) -> int:
        return next(i for i, line in enumerate(lines) if re.search(pattern, line))

    lint, types = first(r"ruff check src tests bench scripts examples"), first(r"/mypy$")
    fast, slow = (
        first(r'pytest -n \S+ (--\S+ \S+ )*-m "not slow and not sam"'),
        first(r'pytest -n \S+ (--\S+ \S+ )*-m "slow or sam"'),
    )
    sam_cli = first(r"pip install .*aws-sam-cli")
    assert lint < types < fast < sam_cli < slow, dry.stdout


def test_a_later_make_test_runs_the_suite_in_one_go(tmp_path: Path) -> None:
    sam = tmp_path / "venv-sam"
    sam.mkdir()
    (sam / ".installed").touch()  # built by an earlier make test
    dry = _make("-n", "test", f"SAM_VENV={sam}")
    runs = [line for line in dry.stdout.splitlines() if re.search(r"/pytest ", line)]
    assert dry.returncode == 0 and len(runs) == 1 and " -m " not in runs[0], dry.stdout
    assert "aws-sam-cli" not in dry.stdout


def _path_with(tmp_path: Path, python312: str | None) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "head").symlink_to(shutil.which("head") or "/usr/bin/head")
    if python312:
        (bin_dir / "python3.12").symlink_to(python312)
    return str(bin_dir)


def test_make_build_says_when_python312_is_missing(tmp_path: Path) -> None:
    result = _make("-s", "check-build-python", path=_path_with(tmp_path, None))
    assert result.returncode != 0
    assert "sam build needs python3.12 on PATH" in result.stderr and "Install Python 3.12" in result.stderr


def test_make_build_refuses_another_python_named_python312(tmp_path: Path) -> None:
    result = _make("-s", "check-build-python", path=_path_with(tmp_path, sys.executable))  # this is 3.11+
    assert sys.version_info[:2] != (3, 12)
    assert result.returncode != 0 and f"Python {sys.version_info[0]}.{sys.version_info[1]}" in result.stderr


def test_make_build_accepts_a_real_python312(tmp_path: Path) -> None:
    python = _python312()
    if python is None:
        pytest.skip("no Python 3.12 on this machine")
    result = _make("-s", "check-build-python", path=_path_with(tmp_path, python))
    assert result.returncode == 0, result.stderr


def test_make_build_checks_the_templates_runtime_unless_it_builds_in_a_container() -> None:
    runtime = re.search(r"(?m)^\s+Runtime: (\S+)", (ROOT / "template.yaml").read_text())
    assert runtime and re.search(rf"(?m)^LAMBDA_PYTHON \?= {runtime[1]}$", (ROOT / "Makefile").read_text())
    assert "sam build needs" in _make("-n", "build").stdout
    assert "sam build needs" not in _make("-n", "build", "SAM_BUILD_ARGS=--use-container").stdout
