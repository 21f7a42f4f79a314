"""HTTP plumbing for the api handler: auth, JSON bodies, and the one error-to-status table."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import os
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from loopengine import errors
from loopengine.resolution import Decider

MAX_BODY_BYTES = 256 * 1024

STATUS: list[tuple[type[errors.LoopengineError], int]] = [
    (errors.InvalidInput, 400),
    (errors.AgentUnavailable, 503),
    (errors.ConfigError, 500),
    (errors.NotFound, 404),
    (errors.Forbidden, 403),
    (errors.Conflict, 409),
    (errors.VersionConflict, 409),
    (errors.AlreadyExists, 409),
    (errors.ModelError, 502),
    (errors.StoreError, 503),
]


class HttpError(Exception):
    """An error that already knows its status and code (401, 413, bad JSON)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def reply(status: int, body: Any) -> Response[str]:
    """A JSON response."""
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body))


def error_reply(exc: Exception) -> Response[str]:
    """Map any library error to DESIGN.md's JSON error; never a stack trace."""
    if isinstance(exc, HttpError):
        return reply(exc.status, {"error": exc.code, "message": str(exc)})
    if isinstance(exc, errors.LoopengineError):
        status = next((s for cls, s in STATUS if isinstance(exc, cls)), 500)
        details = exc.details if isinstance(exc, errors.Conflict) else {}
        return reply(status, {"error": exc.code, "message": str(exc), **details})
    return reply(500, {"error": "internal", "message": "internal error; see the logs"})


def json_body(event: APIGatewayProxyEventV2) -> dict[str, Any]:
    """The request body as a JSON object: 413 when too large, 400 when not a JSON object."""
    raw = event.body or ""
    size = len(raw) * 3 // 4 if event.is_base64_encoded else len(raw.encode())
    if size > MAX_BODY_BYTES:
        raise HttpError(413, "too_large", f"request body is over {MAX_BODY_BYTES} bytes")
    if not raw:
        return {}
    try:
        data = json.loads(event.decoded_body or "")
    except (ValueError, UnicodeDecodeError):
        raise HttpError(400, "bad_json", "request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise HttpError(400, "bad_json", "request body must be a JSON object")
    return data


def decider(event: APIGatewayProxyEventV2, channel: str = "api") -> Decider:
    """Who is calling: the JWT authorizer's claims in AWS, else HTTP Basic (401 when neither).

    ``LOOPENGINE_ADMIN_AUTH`` (``user:password``) turns Basic auth on; with it unset and no JWT
    authorizer, only a local server started with anonymous access allowed lets calls through.
    """
    claims = _jwt_claims(event)
    if claims and claims.get("sub"):
        groups = claims.get("cognito:groups") or claims.get("groups") or ()
        if isinstance(groups, str):
            groups = tuple(g for g in groups.strip("[]").replace(",", " ").split() if g)
        return Decider(str(claims["sub"]), "api-jwt", tuple(str(g) for g in groups))
    expected = os.environ.get("LOOPENGINE_ADMIN_AUTH")
    if not expected:
        if os.environ.get("LOOPENGINE_ALLOW_ANONYMOUS") == "1":
            return Decider("anonymous", channel)
        raise HttpError(401, "unauthorized", "credentials required")
    headers = event.headers or {}
    user = _basic_user(headers.get("authorization") or "", expected)
    if user is None:
        raise HttpError(401, "unauthorized", "missing or wrong credentials")
    return Decider(user, channel)


def _basic_user(header: str, expected: str) -> str | None:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or not token:
        return None
    try:
        given = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not hmac.compare_digest(given, expected.encode()):
        return None
    return expected.split(":", 1)[0]


def _jwt_claims(event: APIGatewayProxyEventV2) -> dict[str, Any]:
    context: dict[str, Any] = event.raw_event.get("requestContext") or {}
    authorizer = context.get("authorizer") or {}
    jwt = authorizer.get("jwt") or {}
    claims = jwt.get("claims") or {}
    return claims if isinstance(claims, dict) else {}


def query_float(event: APIGatewayProxyEventV2, name: str, lo: float, hi: float) -> float | None:
    """A numeric query parameter within [lo, hi]; 400 otherwise; None when absent."""
    raw = (event.query_string_parameters or {}).get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise HttpError(400, "bad_query", f"{name} must be a number") from None
    if not lo <= value <= hi:
        raise HttpError(400, "bad_query", f"{name} must be between {lo:g} and {hi:g}")
    return value
