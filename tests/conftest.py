"""Fixtures shared by the handler tests: an engine installed for the handlers, and its environment.

``install_root`` builds the bundled agents the way a deployment does (:func:`loopengine.http.root.build`);
``install_harness`` builds agents defined in the test on a :mod:`tests.harness` Harness. Both set
:data:`HANDLER_ENV` (and clear what would change the routes' behaviour), install the engine with
``root.install`` for the handlers, and afterwards uninstall it and close its stores.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from loopengine.app.engine import Engine
from loopengine.app.ports import ModelClient, ResumeInvoker
from loopengine.authoring.agent import AgentConfig
from loopengine.http import root
from tests.dev_support import DevProcess
from tests.handler_support import InstallRoot
from tests.harness import Build, Harness, make_harness

settings.register_profile("loopengine", deadline=None)
settings.load_profile("loopengine")
"""No wall-clock deadline for any Hypothesis example (loaded here, before a test module decorates one):
an example that waits for a store or a server, or a machine that two suites load, makes Hypothesis's
200 ms deadline a race, never a finding. A test that wants a deadline says so in its own settings."""

HANDLER_ENV = {
    "LOOPENGINE_ADMIN_AUTH": "admin:secret",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_NAMESPACE": "loopengine-test",
}
UNSET = ("LOOPENGINE_TABLE", "LOOPENGINE_DEFAULT_WEBHOOK_URL", "LOOPENGINE_ALLOW_ANONYMOUS")
"""Variables that would pick DynamoDB, add a default webhook or open the routes to anyone."""


@pytest.fixture
def handler_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Set HANDLER_ENV (admin:secret, quiet Powertools) and unset UNSET; return what was set."""
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    for key, value in HANDLER_ENV.items():
        monkeypatch.setenv(key, value)
    return dict(HANDLER_ENV)


@pytest.fixture
def install_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handler_env: dict[str, str]
) -> Iterator[InstallRoot]:
    """``install_root(invoker, **env)``: the bundled agents built by ``root.build``, installed.

    SQLite in tmp_path, the scripted model, and ``env`` on top of the handlers' environment (all
    also set in ``os.environ``); the engine's resume invoker is replaced by ``invoker(engine)``.
    """
    built: list[Engine] = []

    def make(invoker: Callable[[Engine], ResumeInvoker], **extra: str) -> Engine:
        env = {
            **handler_env,
            "LOOPENGINE_DB": str(tmp_path / f"root{len(built)}.db"),
            "LOOPENGINE_MODEL": "scripted",
            **extra,
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        engine = root.build(env)
        built.append(engine)
        engine.rt.invoker = invoker(engine)
        root.install(engine)
        return engine

    yield make
    root.install(None)
    for engine in built:
        engine.rt.stores.close()


@pytest.fixture
def install_harness(tmp_path: Path, handler_env: dict[str, str]) -> Iterator[Build]:
    """``install_harness(*configs, model=..., inline=True)``: a Harness on SQLite in tmp_path, installed."""
    made: list[Harness] = []

    def make(*configs: AgentConfig, model: ModelClient, inline: bool = True) -> Harness:
        h = make_harness(tmp_path / f"harness{len(made)}.db", *configs, model=model, inline=inline)
        made.append(h)
        root.install(h.engine)
        return h

    yield make
    root.install(None)
    for h in made:
        h.rt.stores.close()


LONG_FIRST = ("slow", "sam")
"""Markers of the long end-to-end tests, which run first (see :func:`pytest_collection_modifyitems`)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Long tests first, the rest in their usual order.

    pytest-xdist hands tests out in this order: a 30-second test started last keeps one worker busy
    while the other has nothing left to do; started first, the short ones fill in around it. A
    test whose mark says ``slow(seconds=N)`` goes before the other long ones, longest first.
    """
    items.sort(key=_longest_first)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection made: the cyclic collector never walks it again (about 6 % of CPU).

    The modules, test items, fixtures and strategies made while collecting live until the run ends,
    yet every full collection walked them all again, and moto's table copies trigger many. The
    Lambda init freezes its imports for the same reason (:mod:`loopengine.http.functions.snapstart`).
    Garbage made later is collected as before.
    """
    gc.collect()
    gc.freeze()


def _longest_first(item: pytest.Item) -> tuple[bool, float]:
    """Sort key: long tests first, the longest (``slow(seconds=...)``, a rough figure) before them."""
    marks = [mark for name in LONG_FIRST if (mark := item.get_closest_marker(name)) is not None]
    return (not marks, -max((float(mark.kwargs.get("seconds", 0)) for mark in marks), default=0.0))


@pytest.fixture
def servers() -> Iterator[list[DevProcess]]:
    """``loopengine dev`` processes a test starts (append them): each stopped when the test ends."""
    started: list[DevProcess] = []
    yield started
    for srv in started:
        srv.stop()
