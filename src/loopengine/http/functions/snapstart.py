"""Lambda init: what a handler loads before its first request, and the two SnapStart runtime hooks.

The handler shims (``src/handlers/*.py``, Lambda only) import this module first. It imports the
third-party packages every invocation in AWS uses (boto3 for DynamoDB and the resume invoke,
pydantic, PyYAML, Powertools), so the init pays for them rather than the first request, then
freezes the garbage collector's view of them (``gc.freeze``): no collection walks those long-lived
objects again. The shims import the handler's own modules inside :func:`loading`, which pauses
the collector meanwhile (those imports make classes, functions and constants, no garbage: measured
0 unreachable objects after them, while the collections cost about 3 % of their CPU), freezes what
they made, and calls :func:`init`, which registers the hooks when the Lambda Python runtime provides
``snapshot_restore_py`` (python3.12 and later; elsewhere, ``loopengine dev`` and tests included,
nothing is registered).

With SnapStart (template.yaml: ``SnapStart: ApplyOn: PublishedVersions``) Lambda runs the init once
per published version, runs :func:`before_snapshot`, snapshots the memory, and restores that
snapshot in every new execution environment, running :func:`after_restore` first.

before the snapshot
    the model SDK is imported (``anthropic``, when a key is configured: ``ANTHROPIC_API_KEY`` or
    its ``..._SECRET_ARN``, and the model is not ``scripted``) and one client made and dropped; the
    engine is built
    (:func:`loopengine.http.root.engine`) and every agent folder parsed, its tool code imported; in
    the api, the OpenAPI document is generated once, which builds every route's request and response
    validation (pydantic) and the Powertools models behind it, then a ``GET /health`` goes through
    the whole resolver, and the channels' request code the routes load on first use (Slack, Lark,
    magic links, the inbox: :data:`~loopengine.http.functions.preload.API_ON_FIRST_USE`) is imported; every
    loopengine pydantic model left to its first use (``defer_build``) is built. A failure here is
    logged and the engine dropped: the request path reports it as it would without SnapStart, and
    the version still publishes.
after a restore
    what must differ between environments, or must not outlive the snapshot, is made fresh (AWS
    "Handling uniqueness with Lambda SnapStart"): ``random`` is re-seeded from the OS (the ids use
    ``secrets``, which reads the OS each time); Powertools Parameters' providers are dropped, with
    their Secrets Manager client and the secret values they cached; the engine is dropped
    (:func:`loopengine.http.root.reconnect`), so its DynamoDB, Lambda, SES/SNS/SQS and Anthropic
    clients are created anew on first use, with the restored environment's credentials and
    connections. The agent registry is kept: parsed configs and imported tool code hold no
    connection (a tool that keeps a client at module level should create it per call).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import random
import sys
from collections.abc import Iterator
from typing import Any, Literal

import boto3  # noqa: F401  (the dependencies every invocation in AWS uses, loaded at init)
import yaml  # noqa: F401
from aws_lambda_powertools import Logger, Metrics  # noqa: F401
from pydantic import BaseModel

from loopengine.domain.base.errors import LoopengineError

gc.freeze()  # the objects above live as long as the process: no collection needs to walk them again

log = logging.getLogger(__name__)

Kind = Literal["api", "resume", "schedule"]


@contextlib.contextmanager
def loading(kind: Kind) -> Iterator[None]:
    """Around a handler shim's import of its own modules: no collection meanwhile, then :func:`init`.

    What the import made lives as long as the process, so it is frozen like the dependencies; the
    collector runs again as before once the block ends, whether the import succeeded or not.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
    init(kind)


def init(kind: Kind) -> bool:
    """Register the SnapStart hooks for the ``kind`` handler; False where the runtime has no hooks."""
    try:
        hooks: Any = importlib.import_module("snapshot_restore_py")
    except ImportError:
        return False
    hooks.register_before_snapshot(before_snapshot, kind)
    hooks.register_after_restore(after_restore)
    return True


def before_snapshot(kind: Kind) -> None:
    """Load and build what the first request of a restored environment would otherwise pay for."""
    from loopengine.http import root
    from loopengine.http.functions import preload

    if preload.wants_model_sdk(os.environ):
        preload.warm_model_sdk()
    try:
        root.engine()
        load_agents()
    except LoopengineError as exc:  # e.g. a secret that cannot be read: the request path says so
        log.warning("snapshot taken without a built engine: %s", exc)
        root.reconnect()
    if kind == "api":
        try:
            warm_api()
        except Exception as exc:  # a warm-up only: the routes still answer (and report) on their own
            log.warning("api warm-up failed before the snapshot: %s", type(exc).__name__)
    build_models()
    gc.collect()  # then what the snapshot holds, alive for the environment's life, is left alone
    gc.freeze()


def load_agents() -> list[str]:
    """Parse every agent folder and import its tools; the names of those that failed (logged)."""
    from loopengine.http import root

    registry = root.registry()
    failed = []
    for name in registry.names():
        try:
            registry.get(name)
        except LoopengineError as exc:
            log.warning("agent %s not loaded before the snapshot: %s", name, exc)
            failed.append(name)
    return failed


def build_models() -> list[str]:
    """Build every loopengine pydantic model left to first use (``defer_build``); their names."""
    built, todo = [], list(BaseModel.__subclasses__())
    while todo:
        model = todo.pop()
        todo.extend(model.__subclasses__())
        if model.__module__.startswith("loopengine.") and not model.__pydantic_complete__:
            model.model_rebuild()
            built.append(f"{model.__module__}.{model.__qualname__}")
    return sorted(built)


HEALTH_EVENT: dict[str, Any] = {
    "version": "2.0",
    "routeKey": "GET /health",
    "rawPath": "/health",
    "rawQueryString": "",
    "headers": {"host": "snapstart.invalid"},
    "requestContext": {
        "http": {"method": "GET", "path": "/health", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1"},
        "requestId": "snapstart-warm-up",
        "routeKey": "GET /health",
        "stage": "$default",
    },
    "isBase64Encoded": False,
}


class _Context:
    """The Lambda context of the warm-up request (no invocation is under way)."""

    function_name = "snapstart-warm-up"
    aws_request_id = "snapstart-warm-up"
    memory_limit_in_mb = 0
    invoked_function_arn = ""

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def warm_api() -> int:
    """Build every route's validation, load the routes' first-use code, resolve ``GET /health``; its status.

    The validation is built by generating the OpenAPI document; the first-use code is
    :data:`~loopengine.http.functions.preload.API_ON_FIRST_USE`.
    """
    from loopengine.http import openapi
    from loopengine.http.api import app
    from loopengine.http.functions import preload

    openapi.document(app)
    preload.load_first_use()
    answer = app.resolve(dict(HEALTH_EVENT), _Context())  # type: ignore[arg-type]
    status = int(answer.get("statusCode", 0))
    if status != 200:
        log.warning("warm-up GET /health answered %s", status)
    return status


def after_restore() -> None:
    """Make fresh what must not be shared between restored environments (see the module's notes)."""
    random.seed()  # from os.urandom
    parameters = sys.modules.get("aws_lambda_powertools.utilities.parameters")
    if parameters is not None:  # a secret was read before the snapshot
        parameters.clear_caches()  # the providers, their boto3 clients and cached secret values
    from loopengine.http import root

    root.reconnect()
