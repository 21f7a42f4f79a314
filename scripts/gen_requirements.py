"""Lock the versions a deployment and CI install, from pyproject.toml (the single source of truth).

Three hashed locks, each resolved by uv for every platform at once (any OS and CPU, Python >= the
project's ``requires-python``), with the sha256 of every file of each pinned version, so that pip or
uv in ``--require-hashes`` mode installs exactly these bytes anywhere:

- ``src/requirements.txt``: ``[project].dependencies``. What ``sam build`` installs (``CodeUri: src/``,
  Lambda's python3.12 on x86_64 and arm64) and what ``make run`` installs.
- ``requirements-dev.txt``: the same pins plus ``[project.optional-dependencies].dev``: ``make test``, CI.
- ``requirements-uv.txt``: the installer itself (uv), which the Makefile installs first with pip.

    python scripts/gen_requirements.py                      # re-lock, keeping the pins pyproject allows
    python scripts/gen_requirements.py --upgrade            # re-lock to the newest versions it allows
    python scripts/gen_requirements.py --upgrade-package X  # ... for X alone
    python scripts/gen_requirements.py --check              # offline: exit 1 when a lock is stale

``--check`` needs no network: each lock records the sha256 of the inputs it was resolved from (a change
to pyproject.toml's lists changes it), and every direct requirement must be pinned to a version its
specifier allows, every pin hashed, the dev lock must hold the runtime pins unchanged, and no lock
may name an index (registry hosts stay out of the repository).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = "src/requirements.txt"
DEV = "requirements-dev.txt"
INSTALLER = "requirements-uv.txt"
INSTALLER_REQUIREMENT = "uv>=0.9"
DIGEST_LINE = "# inputs-sha256: "
HEADER = """\
# Locked by scripts/gen_requirements.py from {source}; do not edit.
# Re-lock: make lock (keeps the current pins) or make lock UPGRADE=1. `--check` fails when stale.
# Resolved for every platform (Lambda's python3.12 on x86_64 and arm64 included), Python >= {python};
# each pin lists the hash of every file of its version: install with --require-hashes.
"""
PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)(?:\s*;\s*(?P<marker>[^\\]+?))?\s*$"
)


@dataclass(frozen=True)
class Pin:
    """One entry of a lock: ``name==version ; marker`` and its hashes."""

    name: str
    version: str
    marker: str
    hashes: tuple[str, ...]

    @property
    def line(self) -> str:
        """The requirement without its hashes (a constraint line)."""
        return f"{self.name}=={self.version}" + (f" ; {self.marker}" if self.marker else "")


@dataclass(frozen=True)
class Inputs:
    """What one lock is resolved from."""

    path: str
    source: str
    requirements: tuple[str, ...]
    python: str

    def digest(self) -> str:
        """The sha256 of the inputs, recorded in the lock's header."""
        text = json.dumps({"requirements": list(self.requirements), "python": self.python})
        return hashlib.sha256(text.encode()).hexdigest()


def canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_inputs(root: Path = ROOT) -> dict[str, Inputs]:
    """The inputs of each lock, read from ``root``/pyproject.toml."""
    with (root / "pyproject.toml").open("rb") as fh:
        project = tomllib.load(fh)["project"]
    found = re.search(r">=\s*(\d+\.\d+)", project.get("requires-python", ""))
    python = found.group(1) if found else "3.11"
    runtime = tuple(" ".join(dep.split()) for dep in project.get("dependencies", []))
    dev = tuple(" ".join(dep.split()) for dep in project.get("optional-dependencies", {}).get("dev", []))
    return {
        RUNTIME: Inputs(RUNTIME, "pyproject.toml's [project].dependencies", runtime, python),
        DEV: Inputs(DEV, "pyproject.toml's dependencies + optional-dependencies.dev", runtime + dev, python),
        INSTALLER: Inputs(INSTALLER, "its INSTALLER_REQUIREMENT", (INSTALLER_REQUIREMENT,), python),
    }


def parse_lock(text: str) -> list[Pin]:
    """The pins of a lock's text (continuation lines joined, comments dropped)."""
    pins: list[Pin] = []
    logical = re.sub(r"\\\n", " ", text)
    for raw in logical.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):  # options: --check refuses them (_lock_problems)
            continue
        hashes = tuple(re.findall(r"--hash=(\S+)", line))
        requirement = re.sub(r"\s*--hash=\S+", "", line).strip()
        match = PIN.match(requirement)
        if match is None:
            raise ValueError(f"not a pinned requirement: {requirement!r}")
        marker = (match.group("marker") or "").strip()
        pins.append(Pin(canonical(match.group("name")), match.group("version"), marker, hashes))
    return pins


def recorded_digest(text: str) -> str | None:
    """The inputs digest a lock's header records."""
    for line in text.splitlines():
        if line.startswith(DIGEST_LINE):
            return line[len(DIGEST_LINE) :].strip()
    return None


def problems(root: Path = ROOT) -> list[str]:
    """Why the locks under ``root`` do not match its pyproject.toml (empty: they are current)."""
    inputs = project_inputs(root)
    found: list[str] = []
    locks: dict[str, list[Pin]] = {}
    for rel, spec in inputs.items():
        path = root / rel
        if not path.exists():
            found.append(f"{rel} is missing")
            continue
        text = path.read_text()
        try:
            pins = parse_lock(text)
        except ValueError as exc:
            found.append(f"{rel}: {exc}")
            continue
        locks[rel] = pins
        if recorded_digest(text) != spec.digest():
            found.append(f"{rel} is stale: {spec.source} changed since it was locked")
        found += _lock_problems(rel, text, pins, spec)
    if RUNTIME in locks and DEV in locks:
        found += _pins_agree(locks[RUNTIME], locks[DEV])
    return found


def _lock_problems(rel: str, text: str, pins: list[Pin], spec: Inputs) -> list[str]:
    from packaging.requirements import Requirement  # a dev dependency: --check runs in the dev env

    found: list[str] = []
    options = re.findall(r"^\s*(-\S*)", re.sub(r"\\\n\s*--hash=\S+", "", text), re.M)
    if "://" in text or options:
        shown = ", ".join(sorted(set(options))) or "a URL"
        found.append(f"{rel} names an index, a URL or an option ({shown}): a lock holds pins and hashes only")
    found += [f"{rel}: {pin.line} has no hash" for pin in pins if not pin.hashes]
    for text_requirement in spec.requirements:
        wanted = Requirement(text_requirement)
        entries = [pin for pin in pins if pin.name == canonical(wanted.name)]
        if not entries and wanted.marker is None:
            found.append(f"{rel} is stale: it does not pin {wanted.name} (wanted: {text_requirement})")
        for pin in entries:
            if not wanted.specifier.contains(pin.version, prereleases=True):
                found.append(f"{rel} is stale: it pins {pin.name}=={pin.version}, outside {text_requirement}")
    return found


def _pins_agree(runtime: list[Pin], dev: list[Pin]) -> list[str]:
    dev_versions: dict[str, set[str]] = {}
    for pin in dev:
        dev_versions.setdefault(pin.name, set()).add(pin.version)
    found = []
    for pin in runtime:  # markers may differ (dev reaches a package by more paths), versions may not
        have = dev_versions.get(pin.name, set())
        if pin.version not in have:
            shown = ", ".join(sorted(have)) or "nothing"
            found.append(
                f"{DEV} pins {pin.name} at {shown} where {RUNTIME} pins {pin.version}: "
                "CI would test other versions than a deployment gets"
            )
    return found


def find_uv(given: str | None, root: Path = ROOT) -> str:
    """The uv to resolve with: ``--uv``, ``$UV``, the Makefile's (``.venv/.uv/bin/uv``) or one on PATH."""
    makefiles = str(root / ".venv" / ".uv" / "bin" / "uv")
    for candidate in (given, os.environ.get("UV"), makefiles, shutil.which("uv")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("no uv to lock with: `make lock` installs one at .venv/.uv/bin/uv (or pass --uv)")


def lock(root: Path, uv: str, upgrade: list[str]) -> None:
    """Resolve and write the three locks under ``root``."""
    inputs = project_inputs(root)
    runtime = _compile(uv, root, inputs[RUNTIME], ["pyproject.toml"], upgrade)
    (root / RUNTIME).write_text(runtime)
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "runtime-pins.txt"
        constraints.write_text("".join(f"{pin.line}\n" for pin in parse_lock(runtime)))
        dev_args = ["pyproject.toml", "--extra", "dev", "--constraint", str(constraints)]
        dev = _compile(uv, root, inputs[DEV], dev_args, upgrade).replace(str(constraints), RUNTIME)
    (root / DEV).write_text(dev)
    installer = _compile(uv, root, inputs[INSTALLER], ["-"], upgrade, stdin=INSTALLER_REQUIREMENT + "\n")
    (root / INSTALLER).write_text(installer)


def _compile(uv: str, root: Path, spec: Inputs, args: list[str], upgrade: list[str], stdin: str = "") -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "lock.txt"
        current = root / spec.path
        if current.exists():  # its pins are uv's preferences: a re-lock moves only what it must
            shutil.copyfile(current, out)
        command = [uv, "pip", "compile", *args, *upgrade, "--universal", "--python-version", spec.python]
        command += ["--generate-hashes", "--no-header", "--no-config", "--quiet", "--output-file", str(out)]
        subprocess.run(command, cwd=root, input=stdin, text=True, check=True)
        body = out.read_text()
    header = HEADER.format(source=spec.source, python=spec.python)
    return f"{header}{DIGEST_LINE}{spec.digest()}\n{body}"


def main(argv: list[str] | None = None) -> int:
    """Write the locks, or with ``--check`` report whether they are current."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="do not resolve; exit 1 if a lock is stale")
    parser.add_argument("--upgrade", action="store_true", help="newest versions pyproject.toml allows")
    parser.add_argument("--upgrade-package", action="append", default=[], metavar="NAME")
    parser.add_argument("--uv", help="the uv executable (default: $UV, .venv/.uv/bin/uv, PATH)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the project folder (default: this checkout)")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    if args.check:
        found = problems(root)
        for problem in found:
            print(problem, file=sys.stderr)
        if found:
            print("Re-lock with: make lock (python scripts/gen_requirements.py)", file=sys.stderr)
            return 1
        print(f"{RUNTIME}, {DEV} and {INSTALLER} are current")
        return 0
    upgrade = ["--upgrade"] if args.upgrade else []
    upgrade += [f"--upgrade-package={name}" for name in args.upgrade_package]
    lock(root, find_uv(args.uv, root), upgrade)
    print(f"wrote {RUNTIME}, {DEV} and {INSTALLER}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
