"""What ``loopengine dev``'s environments share: loaded once, in the process they are forked from.

``loopengine dev`` starts its environments with multiprocessing's ``forkserver`` method: one
server process imports this module, then forks each environment from itself, so N environments
pay the imports once and start with them loaded (copy-on-write). It is the local counterpart of a
SnapStart snapshot (:func:`loopengine.http.functions.snapstart.before_snapshot`), minus everything that holds
a connection or a file: no engine, no store, no agent folder is touched here, because an open
SQLite connection or socket must not be shared across a fork. Each environment builds its own
engine when it starts (``dev_environments._ignore_interrupts``).

Loaded: the api handler and its routes' first-use modules, and the Anthropic SDK with one client
made and dropped when turns here call Anthropic (a key is set and the model is not scripted: about
2 s of CPU that each environment used to pay on its first model call). Not loaded: boto3, which
a local store on SQLite never uses (:mod:`loopengine.http.functions.preload`, not the Lambda init module).
Route validation and the pydantic models left to first use are not built here: a ``loopengine
dev`` serving a few requests (most do) would pay for all of them. Measured (``--workers 2``, CPU of
the whole process tree 4 s after ``GET /health`` answered): 1.17 s spawning, 0.8 s forked from
here, 0.7 s without boto3; at 4 environments 2.0 s, 1.0 s and 0.84 s.

Then the collector is frozen (``gc.freeze``, as the Lambda init does and CPython's documentation
advises before a fork): an environment's full collections never walk what it inherited, nor write
to those objects' headers, so their pages stay shared with the forkserver instead of being copied
into each environment.

Nothing here may raise: the forkserver imports preloaded modules under ``except ImportError`` only,
and any other exception would stop it from starting environments at all. A warm-up that fails is
skipped; the environment then pays for it on first use, as before.
"""

from __future__ import annotations

import gc
import os


def warm() -> list[str]:
    """Load what every environment would load on its first requests; the steps that failed."""
    failed = []
    for name, step in _STEPS:
        try:
            step()
        except Exception:  # a warm-up only: the environment loads it on first use instead
            failed.append(name)
    return failed


def _handler() -> None:
    from loopengine.http import api
    from loopengine.http.functions import preload

    assert api.handler is not None
    preload.load_first_use()


def _model_sdk() -> None:
    from loopengine.http.functions import preload

    if preload.wants_model_sdk(os.environ):
        preload.warm_model_sdk()


_STEPS = (("handler", _handler), ("model SDK", _model_sdk))

FAILED = warm()
"""What the warm-up could not load (empty when all went well)."""

gc.collect()
gc.freeze()  # before the forks: see the module's notes
