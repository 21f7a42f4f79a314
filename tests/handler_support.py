"""Drive the Lambda handlers with the sample events in ``events/`` (as ``sam local invoke -e`` would)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from aws_lambda_powertools.utilities.typing import LambdaContext

from loopengine.app.engine import Engine
from loopengine.local.dev import LocalContext

EVENTS = Path(__file__).resolve().parent.parent / "events"
PLACEHOLDER_PENDING = "pnd_00000000000000000000000000000000"
PLACEHOLDER_TURN = "trn_00000000000000000000000000000000"

InstallRoot = Callable[..., Engine]
"""``install_root(invoker, **env)``: the ``install_root`` fixture (tests/conftest.py)."""


@dataclass
class FakeContext(LocalContext):
    """The dev server's Lambda context with a fixed remaining time (set ``remaining_ms`` to change it)."""

    remaining_ms: int = 29_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def lambda_context(context: LocalContext) -> LambdaContext:
    """``context`` typed as the handlers' parameter: it has the Lambda context attributes they read."""
    return cast("LambdaContext", context)


def load_event(name: str, **subst: str) -> dict[str, Any]:
    """Load ``events/<name>.json`` replacing placeholder ids (pendingId=..., turnId=..., ...)."""
    text = (EVENTS / f"{name}.json").read_text()
    if "pendingId" in subst:
        text = text.replace(PLACEHOLDER_PENDING, subst.pop("pendingId"))
    if "turnId" in subst:
        text = text.replace(PLACEHOLDER_TURN, subst.pop("turnId"))
    for key, value in subst.items():
        text = text.replace(key, value)
    event: dict[str, Any] = json.loads(text)
    return event


def with_body(event: dict[str, Any], body: Any) -> dict[str, Any]:
    """The same event with another JSON body (a string body is sent as is)."""
    event = dict(event)
    event["body"] = body if isinstance(body, str) else json.dumps(body)
    return event


def with_auth(event: dict[str, Any], user: str | None, password: str = "secret") -> dict[str, Any]:
    """The same event with other Basic credentials (None removes them)."""
    event = dict(event)
    headers = dict(event.get("headers") or {})
    headers.pop("authorization", None)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["authorization"] = f"Basic {token}"
    event["headers"] = headers
    return event


def call(handler: Any, event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Invoke an api handler; return (status, the parsed JSON body, or ``{"html"|"text": body}``)."""
    result = handler(event, FakeContext())
    headers = {k.lower(): v for k, v in (result.get("headers") or {}).items()}
    if headers.get("content-type", "").startswith("text/html"):
        return int(result["statusCode"]), {"html": result["body"]}
    if headers.get("content-type", "").startswith("text/"):  # the inbox's stylesheet and script
        return int(result["statusCode"]), {"text": result["body"]}
    return int(result["statusCode"]), json.loads(result["body"] or "{}")
