"""What a process loads ahead of its first request, shared by Lambda's init and ``loopengine dev``.

:mod:`loopengine.http.functions.snapstart` (Lambda: before the snapshot) and :mod:`loopengine.local.dev_warm`
(``loopengine dev``'s forkserver, before it forks the environments) both load the routes'
first-use code and, when turns call Anthropic, the model SDK. This module names them and imports
no SDK itself: ``loopengine dev`` on SQLite never needs boto3, which snapstart imports for Lambda
(about 0.15 s of CPU for every ``loopengine dev`` start when the forkserver went through snapstart).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from loopengine.http import secrets

MODEL_KEY = "ANTHROPIC_API_KEY"
API_ON_FIRST_USE = (
    "loopengine.channels.slack.interactions",
    "loopengine.channels.lark.interactions",
    "loopengine.channels.magic.links",
    "loopengine.channels.inbox.pages",
    "loopengine.channels.chat.pages",
)
"""The api's modules its routes import on their first request (a cold start needs none of them)."""


def wants_model_sdk(env: Mapping[str, str]) -> bool:
    """Whether turns here call Claude: not scripted, and Bedrock is the provider or a key is set."""
    if env.get("LOOPENGINE_MODEL") == "scripted":
        return False
    if (env.get("LOOPENGINE_MODEL_PROVIDER") or "").strip().lower() == "bedrock":
        return True
    return bool(env.get(MODEL_KEY) or env.get(secrets.arn_variable(MODEL_KEY)))


def warm_model_sdk() -> None:
    """Import the Anthropic SDK, then make one client and drop it.

    The first client costs more than the import (the SDK's HTTP stack, parts it loads lazily); no
    request is sent and no key is read.
    """
    anthropic: Any = importlib.import_module("anthropic")
    importlib.import_module("loopengine.models.anthropic")
    anthropic.Anthropic(api_key="snapshot-warm-up-never-sent", max_retries=0).close()


def load_first_use() -> None:
    """Import the routes' first-use code (:data:`API_ON_FIRST_USE`)."""
    for module in API_ON_FIRST_USE:
        importlib.import_module(module)
