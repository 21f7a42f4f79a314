"""HTTP plumbing for the api handler: auth, request data at the edge, and the one error-to-status table.

Request data enters only through :func:`raw_body`, :func:`json_body` (which Powertools' request
validation reads JSON bodies through, :mod:`loopengine.http.validation`), :func:`form_body` and the
:func:`edge` middleware (query strings and paths), so DESIGN.md's input hygiene holds on every
route: invalid UTF-8, lone surrogates, JSON nested deeper than 64 levels and non-finite numbers are
400 ``invalid_input`` before anything changes or any model sees them (:mod:`loopengine.domain.base.jsonsafe`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from loopengine.app.request.waits import TooManyWaits
from loopengine.app.usage import TokenAllowanceExceeded
from loopengine.domain.base import errors, jsonsafe
from loopengine.domain.base.limits import MAX_BODY_BYTES as MAX_BODY_BYTES
from loopengine.domain.idempotency import IdempotencyMismatch
from loopengine.http.observability import logger

STATUS: list[tuple[type[errors.LoopengineError], int]] = [
    (IdempotencyMismatch, 422),
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


JSON_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
"""On every JSON answer: never sniffed into HTML, never cached (bodies carry private data)."""


def reply(status: int, body: Any) -> Response[Any]:
    """A JSON response with :data:`JSON_HEADERS`.

    The body is serialised after Powertools checked it against the route's model.
    """
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=dict(JSON_HEADERS)
    )


def error_reply(exc: Exception) -> Response[Any]:
    """Map any library error to DESIGN.md's JSON error; never a stack trace."""
    if isinstance(exc, HttpError):
        return reply(exc.status, {"error": exc.code, "message": str(exc)})
    if isinstance(exc, TooManyWaits | TokenAllowanceExceeded):
        answer = reply(429, {"error": exc.code, "message": str(exc)})
        answer.headers["Retry-After"] = str(exc.retry_after)
        return answer
    if isinstance(exc, errors.LoopengineError):
        status = next((s for cls, s in STATUS if isinstance(exc, cls)), 500)
        details = exc.details if isinstance(exc, errors.Conflict) else {}
        return reply(status, {"error": exc.code, "message": str(exc), **details})
    return reply(500, {"error": "internal", "message": "internal error; see the logs"})


def raw_body(event: APIGatewayProxyEventV2) -> bytes:
    """The request body's bytes (base64-decoded when API Gateway encoded it).

    413 when over :data:`MAX_BODY_BYTES`; InvalidInput when the base64 is broken or a text body
    holds lone surrogates (it cannot be the UTF-8 a client sent).
    """
    raw = event.body or ""
    if not isinstance(raw, str):
        raise errors.InvalidInput("request body must be text")
    size = len(raw) * 3 // 4 if event.is_base64_encoded else len(raw)
    if size > MAX_BODY_BYTES:
        raise HttpError(413, "too_large", f"request body is over {MAX_BODY_BYTES} bytes")
    try:
        data = base64.b64decode(raw, validate=True) if event.is_base64_encoded else raw.encode("utf-8")
    except (binascii.Error, ValueError):  # broken base64, or lone surrogates in the text
        raise errors.InvalidInput("request body could not be decoded (base64 or Unicode)") from None
    if len(data) > MAX_BODY_BYTES:
        raise HttpError(413, "too_large", f"request body is over {MAX_BODY_BYTES} bytes")
    return data


def json_body(event: APIGatewayProxyEventV2) -> dict[str, Any]:
    """The request body as a JSON object: 413 when too large, 400 when not strict JSON or no object."""
    raw = raw_body(event)
    if not raw:
        return {}
    data = jsonsafe.parse_json(raw)  # BadJson (400 bad_json) or InvalidInput (400 invalid_input)
    if not isinstance(data, dict):
        raise HttpError(400, "bad_json", "request body must be a JSON object")
    return data


def form_body(event: APIGatewayProxyEventV2, max_fields: int) -> dict[str, str]:
    """A urlencoded form body, first value per field; InvalidInput when not strict UTF-8 form data."""
    text = jsonsafe.decode_utf8(raw_body(event))
    try:
        parsed = parse_qs(text, keep_blank_values=True, max_num_fields=max_fields, errors="strict")
    except ValueError:  # too many fields, or a %-escape that is not UTF-8
        raise errors.InvalidInput("request body is not a valid UTF-8 form") from None
    return {key: values[0] for key, values in parsed.items()}


def check_request(event: APIGatewayProxyEventV2) -> None:
    """Refuse lone surrogates in the path and the query string (400 ``invalid_input``)."""
    try:
        jsonsafe.check_text(event.raw_path or "", "the request path")
        for key, value in (event.query_string_parameters or {}).items():
            jsonsafe.check_text(key, "a query parameter")
            jsonsafe.check_text(value, f"query parameter {key}")
        for value in (event.path_parameters or {}).values():
            jsonsafe.check_text(value, "the request path")
    except errors.InvalidInput as exc:
        raise HttpError(400, "invalid_input", str(exc)) from None


def edge(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response[str]:
    """Global middleware: :func:`check_request` before any route runs."""
    check_request(app.current_event)
    response: Response[str] = next_middleware(app)
    return response


class Stop(Exception):
    """Stop handling a page and answer with this one (a refusal found deep in a page handler)."""

    def __init__(self, response: Response[str]) -> None:
        super().__init__(response.status_code)
        self.response = response


def guarded(
    run: Callable[[], Response[str]],
    where: str,
    failed: Callable[[int], Response[str]],
    refused: Callable[[int, str], Response[str]],
    *,
    unavailable: int | None = 503,
) -> Response[str]:
    """``run()`` of an HTML page, every failure a page: a 4xx page, never a 500 with a stack trace.

    A :class:`Stop` answers its page; an error of :data:`STATUS` under 500 is ``refused(status,
    why)``; one of 500 or more (the store, the model, the agent's configuration) is logged as a
    warning and ``failed(unavailable)`` (``None``: the error's own status, 503 for a 500): try again;
    anything else is logged with its stack and ``failed(500)``: something broke. ``where`` names
    the page in the log.
    """
    try:
        return run()
    except Stop as stop:
        return stop.response
    except errors.LoopengineError as exc:
        status = next((s for cls, s in STATUS if isinstance(exc, cls)), 500)
        if status >= 500:
            logger.warning(f"{where} page failed", extra={"error": type(exc).__name__})
            return failed(unavailable if unavailable is not None else (status if status != 500 else 503))
        return refused(status, str(exc))
    except Exception:
        logger.exception(f"{where} page failed")
        return failed(500)
