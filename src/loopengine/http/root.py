"""The composition root: read the environment once per cold start and build the engine.

The environment is :func:`loopengine.http.secrets.environ`: secrets named by ``..._SECRET_ARN`` variables
are read from Secrets Manager when first needed (and re-read after their cache age).

Every handler gets its Engine from :func:`engine`. Tests and ``loopengine dev`` install their own
with :func:`install` (for example one whose invoker records or runs resumes in-process).

The agent registry (parsed agent folders, imported tool code) is kept apart from the engine: after
a SnapStart restore :func:`reconnect` drops the engine, whose stores, invoker, model and notifiers
hold network clients made before the snapshot, and keeps the registry, which holds none
(:mod:`loopengine.http.functions.snapstart`).
"""

from __future__ import annotations

from collections.abc import Mapping

from loopengine.app.engine import Engine
from loopengine.app.invokers import ThreadInvoker
from loopengine.app.ports import ResumeInvoker
from loopengine.authoring.registry import AgentRegistry
from loopengine.bootstrap import build_runtime
from loopengine.http import secrets

_engine: Engine | None = None
_registry: AgentRegistry | None = None


def _invoker(env: Mapping[str, str]) -> tuple[ResumeInvoker, ThreadInvoker | None]:
    function = env.get("LOOPENGINE_RESUME_FUNCTION")
    if function:
        from loopengine.aws.lambda_invoker import LambdaInvoker

        pin = env.get("LOOPENGINE_PIN_RESUME_VERSION", "true").lower() != "false"
        return LambdaInvoker(function, env.get("LOOPENGINE_RESUME_VERSION") or None, pin=pin), None
    local = ThreadInvoker()
    return local, local


def build(env: Mapping[str, str], *, registry: AgentRegistry | None = None) -> Engine:
    """An Engine for this environment (Lambda invoker in AWS, background threads locally)."""
    invoker, local = _invoker(env)
    from loopengine.http.observability import observe

    engine = Engine(build_runtime(env, invoker=invoker, registry=registry))
    engine.rt.observer = observe
    if local is not None:
        local.resume = engine.resume
    return engine


def registry() -> AgentRegistry:
    """The process-wide agent registry (the ``agents`` package and ``LOOPENGINE_AGENTS_PATH``)."""
    global _registry
    if _registry is None:
        _registry = AgentRegistry.from_env(secrets.environ())
    return _registry


def engine() -> Engine:
    """The process-wide Engine, built on first use."""
    global _engine
    if _engine is None:
        _engine = build(secrets.environ(), registry=registry())
    return _engine


def reconnect() -> None:
    """Drop the engine (the next :func:`engine` builds one with fresh clients); keep the registry."""
    global _engine
    _engine = None


def install(new: Engine | None) -> None:
    """Replace the process-wide Engine (tests, ``loopengine dev``); ``None`` resets it and the registry."""
    global _engine, _registry
    _engine, _registry = new, None
