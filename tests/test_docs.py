"""The docs state only what the code defines: names, routes, modules, figures and links are checked here.

Each check reads the docs and the code (or template.yaml, or DESIGN.md beside the repository) at run
time, so a renamed variable, a new module, a route or a changed limit fails here until the page says
so. README.md keeps what a newcomer needs first; the rest lives in docs/, one page per concern.
"""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

import pytest

import loopengine
from tests.design_routes import (
    BILL_ROUTES,
    CHAT_ROUTES,
    DESIGN_MD,
    DESIGN_ROUTES,
    INBOX_ROUTES,
    NO_DESIGN_MD,
    NOT_IN_TEMPLATE_YET,
    design_md_routes,
    served_routes,
    table_routes,
    template_routes,
)
from tests.test_layering import ALLOWED

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PACKAGE = Path(loopengine.__file__).parent
PAGES = sorted([README, *DOCS.glob("*.md")])
VARIABLE = re.compile(r"\bLOOPENGINE_[A-Z0-9_]*[A-Z0-9]\b")
NOT_READ_YET = "## Named by DESIGN.md, not read yet"


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def section(page: str, heading: str) -> str:
    """The text under ``heading`` (a ``## `` line) up to the next heading of the same level."""
    assert heading in page, f"missing section {heading!r}"
    return page.split(heading, 1)[1].split("\n## ", 1)[0]


def table(markdown: str) -> list[list[str]]:
    """The body rows of the markdown tables in ``markdown`` (header rows left out), cells stripped."""
    lines = markdown.splitlines()
    rows = []
    for i, line in enumerate(lines):
        header = i + 1 < len(lines) and lines[i + 1].startswith("|---")
        if line.startswith("|") and not line.startswith("|---") and not header:
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def ticked(cell: str) -> list[str]:
    """The ``code`` spans of a cell."""
    return re.findall(r"`([^`]+)`", cell)


# -- environment variables -------------------------------------------------------------------------


def read_by_code() -> set[str]:
    """Every LOOPENGINE_* name the code under src/ reads: a string constant that is exactly the name."""
    names: set[str] = set()
    for path in sorted((ROOT / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(text(path))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and VARIABLE.fullmatch(node.value)
            ):
                names.add(node.value)
    return names


def named_by_tooling() -> set[str]:
    """LOOPENGINE_* names the build, deployment and test files use (scripts, Makefile, template, ...)."""
    files = [
        ROOT / "Makefile",
        ROOT / "template.yaml",
        *(ROOT / "scripts").glob("*"),
        *(ROOT / ".ci").glob("*"),
    ]
    files += [*(ROOT / "events").glob("*.json"), *(ROOT / "tests").rglob("*.py")]
    return {n for f in files if f.is_file() for n in VARIABLE.findall(text(f))}


def test_every_variable_the_code_reads_is_in_configuration_md() -> None:
    page = text(DOCS / "configuration.md").split(NOT_READ_YET)[0]
    documented = {n for row in table(page) for n in VARIABLE.findall(row[0])}
    missing = sorted(read_by_code() - documented)
    assert not missing, f"read by src/ but not in docs/configuration.md's table: {missing}"


def test_every_variable_the_docs_name_exists() -> None:
    from loopengine.http.secrets import arn_variable

    read = read_by_code()
    known = read | {arn_variable(n) for n in read} | named_by_tooling()
    page = text(DOCS / "configuration.md")
    not_read_yet = set(VARIABLE.findall(section(page, NOT_READ_YET))) if NOT_READ_YET in page else set()
    design = set(VARIABLE.findall(text(DESIGN_MD))) if DESIGN_MD.exists() else not_read_yet
    unknown = {f"{p.name}: {n}" for p in PAGES for n in VARIABLE.findall(text(p)) if n not in known | design}
    assert not unknown, f"named in the docs, read nowhere and not in DESIGN.md: {sorted(unknown)}"


def test_variables_named_but_not_read_yet_are_not_read() -> None:
    if NOT_READ_YET not in text(DOCS / "configuration.md"):  # every variable DESIGN.md names is read
        if DESIGN_MD.exists():
            unread = set(VARIABLE.findall(text(DESIGN_MD))) - read_by_code()
            assert not unread, f"named by DESIGN.md, read nowhere and not listed as such: {sorted(unread)}"
        return
    listed = {
        n for row in table(section(text(DOCS / "configuration.md"), NOT_READ_YET)) for n in ticked(row[0])
    }
    assert listed, "the section lists its variables in a table"
    now_read = listed & read_by_code()
    assert not now_read, f"{sorted(now_read)}: read by the code now; move them into the main table"
    if DESIGN_MD.exists():
        assert listed <= set(VARIABLE.findall(text(DESIGN_MD)))


def test_configuration_defaults_are_the_codes() -> None:
    from loopengine import bootstrap
    from loopengine.app.runtime import Runtime
    from loopengine.http import budget

    rows = {ticked(r[0])[0]: r[1] for r in table(text(DOCS / "configuration.md")) if ticked(r[0])}
    code = {var: getattr(Runtime, field) for field, var in bootstrap.TIMINGS.items()}
    code["LOOPENGINE_API_BUDGET_SECONDS"] = budget.API_BUDGET_SECONDS
    for var, value in code.items():
        assert float(rows[var]) == value, var
    assert rows["LOOPENGINE_DB"] == f"`{bootstrap.DEFAULT_DB}`"
    # the timings the bootstrap validates are the ones the page says refuse to start
    paragraph = next(p for p in text(DOCS / "configuration.md").split("\n\n") if "refuses to start" in p)
    assert set(VARIABLE.findall(paragraph)) == set(bootstrap.TIMINGS.values())


# -- routes ----------------------------------------------------------------------------------------


def http_api_rows() -> dict[str, str]:
    routes = section(text(DOCS / "http-api.md"), "## Routes")
    out: dict[str, str] = {}
    for row in table(routes):
        for route in table_routes(f"| {row[0]} |"):
            out[route] = row[1]
    return out


def test_http_api_route_table_is_the_templates() -> None:
    assert set(http_api_rows()) == template_routes()


def test_routes_marked_not_served_yet_are_exactly_those_the_app_lacks() -> None:
    from loopengine.http import api

    marked = {route for route, what in http_api_rows().items() if "not served yet" in what}
    assert marked == template_routes() - served_routes(api.app)


def test_design_routes_copy_is_design_mds_table() -> None:
    routes = design_md_routes()
    if routes is None:
        pytest.skip(NO_DESIGN_MD)
    assert routes - NOT_IN_TEMPLATE_YET == DESIGN_ROUTES - INBOX_ROUTES - BILL_ROUTES - CHAT_ROUTES
    design = DESIGN_MD.read_text(encoding="utf-8")
    assert all(f"`{route.split(' ', 1)[1]}`" in design for route in CHAT_ROUTES)  # named in its prose
    assert routes >= NOT_IN_TEMPLATE_YET, "a route listed as not in the template yet left DESIGN.md"
    assert not NOT_IN_TEMPLATE_YET & template_routes(), "it is in the template now: drop it from the list"


def test_design_md_routes_is_none_without_the_file(tmp_path: Path) -> None:
    assert design_md_routes(tmp_path / "DESIGN.md") is None


def test_routes_not_built_yet_are_not_served() -> None:
    from loopengine.http import api

    page = section(text(DOCS / "http-api.md"), "## Not built yet")
    # an item that starts with a route is about that route
    named = {f"{m} {p}" for m, p in re.findall(r"^- `(GET|POST) (/\S*)`", page, re.MULTILINE)}
    assert not named & served_routes(api.app), "served now: take it out of 'Not built yet'"
    design = design_md_routes()
    if design is not None:  # and a route DESIGN.md names that the app does not serve is listed there
        assert design - served_routes(api.app) <= named, "not served: list it under 'Not built yet'"


def test_features_not_built_yet_are_absent() -> None:
    from loopengine.domain.turns import TurnStatus
    from loopengine.http import api, openapi

    page = section(text(DOCS / "http-api.md"), "## Not built yet")
    source = "\n".join(text(p) for p in sorted((PACKAGE / "http").rglob("*.py")))
    if "`Idempotency-Key`" in page:
        assert "idempotency-key" not in source.lower(), "the header is handled now: document it"
    if "429" in page:
        assert '"429"' not in text(DOCS / "openapi.json"), "a 429 is documented now: document the limit"
        assert "429" not in openapi.render(api.app)
    if "`retrying`" in page:
        assert "retrying" not in {s.public() for s in TurnStatus}


def test_notification_channels_are_the_registrys() -> None:
    from loopengine.channels.base import CHANNELS

    rows = table(section(text(DOCS / "http-api.md"), "## Notifications (outgoing)"))
    assert {ticked(r[0])[0] for r in rows} == set(CHANNELS)


# -- the deploy page -------------------------------------------------------------------------------


def test_deploy_parameter_table_is_the_templates() -> None:
    from samtranslator.yaml_helper import yaml_parse

    declared = set(yaml_parse(text(ROOT / "template.yaml"))["Parameters"])
    rows = table(section(text(DOCS / "deploy.md"), "## Parameters"))
    documented = [name for r in rows for name in ticked(r[0])]
    assert sorted(documented) == sorted(declared)


# -- figures the code defines ----------------------------------------------------------------------


def test_figures_in_the_docs_are_the_codes() -> None:
    from loopengine.channels import signing
    from loopengine.channels.slack import interact
    from loopengine.domain.base import limits
    from loopengine.http import secrets
    from loopengine.local import dev_guard, dev_http

    security, http_api = text(DOCS / "security.md"), text(DOCS / "http-api.md")
    figures = [
        (http_api, "413 body over 256 KiB", limits.MAX_BODY_BYTES, 256 * 1024),
        (security, "over 256 KiB is 413", limits.MAX_BODY_BYTES, 256 * 1024),
        (http_api, "nested deeper than 64", limits.MAX_JSON_DEPTH, 64),
        (http_api, "wait at most 25 seconds", limits.MAX_WAIT_SECONDS, 25),
        (security, "rejects more than 300 s of skew", signing.DEFAULT_TOLERANCE, 300),
        (security, "more than 300 s of\nskew is refused", interact.DEFAULT_TOLERANCE, 300),
        (security, "cached\n5 minutes", secrets.MAX_AGE, 300),
        (security, "`--read-timeout SECONDS` (default 10)", dev_http.READ_TIMEOUT, 10),
    ]
    for page, phrase, value, expected in figures:
        assert " ".join(phrase.split()) in " ".join(page.split()), phrase
        assert value == expected, phrase
    assert {"127.0.0.1", "localhost", "::1"} == dev_guard.LOOPBACK_HOSTS


def test_limits_table_is_limits_py() -> None:
    from loopengine.domain.base import limits

    rows = {ticked(r[0])[0]: float(r[1]) for r in table(section(text(DOCS / "http-api.md"), "## Limits"))}
    code = {name: float(getattr(limits, name)) for name in dir(limits) if name.isupper()}
    assert rows == code


# -- the architecture map --------------------------------------------------------------------------

PATH = re.compile(
    r"`((?:src|tests|docs|scripts|bench|events)/[\w./-]*|(?:[\w-]+/)*[\w-]+\.py|[a-z_]+/(?:[a-z_]+/)?)`"
)


def architecture() -> str:
    return text(DOCS / "architecture.md")


def resolve(name: str) -> Path:
    """A path named in the docs: repository-relative when it starts with a top folder, else in the package."""
    top = name.split("/", 1)[0]
    return ROOT / name if top in {"src", "tests", "docs", "scripts", "bench", "events"} else PACKAGE / name


def test_every_module_architecture_md_names_exists() -> None:
    named = set(PATH.findall(architecture()))
    missing = sorted(n for n in named if not resolve(n).exists())
    assert not missing, f"docs/architecture.md names what is not on disk: {missing}"


def test_architecture_md_names_every_module_and_package() -> None:
    named = set(PATH.findall(architecture()))
    modules = {
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" or p.parent == PACKAGE
    }
    packages = {p.parent.relative_to(PACKAGE).as_posix() + "/" for p in PACKAGE.rglob("*/__init__.py")}
    missing = sorted((modules | packages) - named)
    assert not missing, f"on disk but not in docs/architecture.md: {missing}"


def test_architecture_md_room_table_is_the_layering_tests() -> None:
    rows = table(section(architecture(), "## The rooms and the arrows"))
    seen = set()
    for row in rows:
        rooms = [r.removesuffix("/").removesuffix(".py") for r in ticked(row[0])]
        for room in rooms:
            if room in ALLOWED:
                allowed = {r.removesuffix("/").removesuffix(".py") for r in ticked(row[1])}
                assert allowed == ALLOWED[room] - {room}, room
                seen.add(room)
    assert seen == set(ALLOWED)


def defines(module: Path, symbol: str) -> bool:
    """Whether ``module`` defines ``symbol`` (``name`` or ``Class.method``) at its top level."""
    tree = ast.parse(text(module))
    head, _, attr = symbol.partition(".")
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        if head in names:
            if not attr:
                return True
            return isinstance(node, ast.ClassDef) and any(
                isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == attr for n in node.body
            )
    return False


def seed_rows() -> list[list[str]]:
    return table(section(architecture(), "## Where each rule lives"))


def test_each_seed_rule_lives_in_one_module_that_defines_it() -> None:
    rows = seed_rows()
    assert len(rows) >= 40
    for rule, _seed, module, where in rows:
        modules = ticked(module)
        assert len(modules) == 1, f"{rule}: one module each"
        path = resolve(modules[0])
        assert path.is_file(), f"{rule}: {modules[0]} does not exist"
        for symbol in ticked(where):
            assert defines(path, symbol.removesuffix("()")), f"{rule}: {modules[0]} defines no {symbol}"
    seeds = {row[1] for row in rows}
    assert {"000", "003", "004"} <= seeds <= {"000", "003", "004", "DESIGN"}, seeds


def test_every_core_rule_of_design_md_is_in_the_seed_table() -> None:
    if not DESIGN_MD.exists():
        pytest.skip(NO_DESIGN_MD)
    core = section(text(DESIGN_MD), "## Core semantics (seed 000 + seed 004)")
    headings = [h.rstrip(":.").lower() for h in re.findall(r"^- \*\*(.+?)\*\*", core, re.MULTILINE)]
    assert len(headings) >= 10
    rules = " / ".join(row[0].lower() for row in seed_rows())
    missing = [h for h in headings if h not in rules]
    assert not missing, f"DESIGN.md's core rules not in the map: {missing}"


# -- paths, links and the README ------------------------------------------------------------------

REPO_PATH = re.compile(r"`((?:src|tests|scripts|bench|events|docs)/[\w./-]+|loopengine/[\w/]+\.py)`")
DOTTED = re.compile(r"`(loopengine(?:\.\w+)+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_a_page_names_exists(page: Path) -> None:
    missing = []
    for name in REPO_PATH.findall(text(page)):
        path = ROOT / "src" / name if name.startswith("loopengine/") else ROOT / name
        if not path.exists():
            missing.append(name)
    for dotted in DOTTED.findall(text(page)):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            base = ROOT / "src" / Path(*parts[:cut])
            module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
            if module.exists():
                rest = parts[cut:]
                if len(rest) > 1 or (rest and not defines(module, rest[0])):
                    missing.append(dotted)
                break
        else:
            missing.append(dotted)
    assert not missing, f"{page.name} names what does not exist: {missing}"


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of ``page``."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text(page), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", "")).replace(" ", "-")
        out.add(slug)
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(text(page)):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists() or (anchor and (path.suffix != ".md" or anchor not in anchors(path))):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def test_readme_lists_every_docs_page() -> None:
    docs = section(text(README), "## Documentation")
    listed = {Path(t).name for t in LINK.findall(docs)}
    assert listed == {p.name for p in DOCS.iterdir() if p.suffix in {".md", ".json"}}


def test_readme_keeps_the_two_commands_and_they_are_make_targets() -> None:
    readme, makefile = text(README), text(ROOT / "Makefile")
    for target in ("run", "test", "dev"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), target
    assert ".venv/bin/loopengine" in readme and "source .venv/bin/activate" in readme
    assert len(readme.splitlines()) <= 200, "README holds what a newcomer needs first; the rest is in docs/"


def test_readme_counts_the_locks_pins() -> None:
    readme = " ".join(text(README).split())
    for lock in ("src/requirements.txt", "requirements-dev.txt"):
        pins = len(re.findall(r"^[A-Za-z0-9].*==", text(ROOT / lock), re.MULTILINE))  # as the Makefile counts
        assert re.search(rf"`{re.escape(lock)}`[^.]*?\b{pins} pinned packages", readme), lock


def test_readme_commands_are_the_clis() -> None:
    import argparse

    from loopengine.local.cli import _parser

    [sub] = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    commands = set(sub.choices)
    line = re.search(r"\.venv/bin/loopengine (demo \| .+)", text(README))
    assert line is not None
    shown = {part.split()[0] for part in line.group(1).split("|")}
    assert shown == commands


def test_readme_transcript_is_what_the_demo_prints(tmp_path: Path) -> None:
    from loopengine.local.demo import run_demo

    out = io.StringIO()
    assert run_demo(str(tmp_path / "demo.db"), fresh=True, out=out) == 0
    printed = re.sub(r"pnd_[0-9a-f]+", "pnd_…", out.getvalue())
    transcript = text(README).split("`make run` prints a step-by-step transcript")[1].split("```")[1]
    for line in transcript.splitlines():
        step = line.strip()
        if not step.startswith(("===", "[")):
            continue
        head = re.split(r"\s{2,}|\s->\s", step.rstrip("= "))[0].strip()
        assert head in printed, f"README's transcript says {head!r}; the demo does not print it"
