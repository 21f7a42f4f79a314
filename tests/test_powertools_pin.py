"""The private Powertools hooks :mod:`loopengine.http.validation` overrides, checked on the installed release.

``validation.py`` puts the guards (auth, then input hygiene) before Powertools' request validation by
taking the resolver's ``_request_validation_middleware`` slot, and parses bodies strictly by overriding
the middleware's ``_get_body``. Neither is public API, so pyproject.toml pins aws-lambda-powertools to
the tested range, and these tests fail on a release that drops either hook, changes its signature or
stops calling it: run them before widening the pin.
"""

from __future__ import annotations

import inspect
import json
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import Route
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.middlewares.openapi_validation import (
    OpenAPIRequestValidationMiddleware,
)
from packaging.requirements import Requirement
from pydantic import BaseModel

from loopengine.http import validation, web

ROOT = Path(__file__).resolve().parent.parent


class Note(BaseModel):
    text: str
    size: float = 0.0  # pydantic takes NaN for a float: only the strict parser refuses it


def _pinned() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (found,) = [r for r in map(Requirement, project["dependencies"]) if r.name == "aws-lambda-powertools"]
    return found


def test_the_installed_powertools_is_in_the_pinned_range() -> None:
    pinned = _pinned()
    installed = metadata.version("aws-lambda-powertools")
    assert pinned.specifier.contains(installed), (installed, str(pinned.specifier))
    # an upper bound: `make lock --upgrade` must never move to a release these tests have not seen
    assert any(spec.operator in ("<", "<=", "==", "~=") for spec in pinned.specifier), str(pinned)


# ------------------------------------------------------------------ the hooks, as the source declares them


def test_get_body_takes_the_app_and_the_request_validation_calls_it() -> None:
    hook = OpenAPIRequestValidationMiddleware._get_body
    assert list(inspect.signature(hook).parameters) == ["self", "app"]
    assert "self._get_body(app)" in inspect.getsource(OpenAPIRequestValidationMiddleware.handler)
    # GuardedValidation overrides exactly these, with the same parameters
    assert list(inspect.signature(validation.GuardedValidation._get_body).parameters) == ["self", "app"]
    handler = inspect.signature(OpenAPIRequestValidationMiddleware.handler)
    assert list(handler.parameters) == ["self", "app", "next_middleware"]
    assert list(inspect.signature(OpenAPIRequestValidationMiddleware.__init__).parameters) == ["self"]


def test_the_resolver_has_the_slot_and_routes_run_it_before_every_other_middleware() -> None:
    app = APIGatewayHttpResolver(enable_validation=True)
    assert type(getattr(app, validation.SLOT)) is OpenAPIRequestValidationMiddleware
    source = inspect.getsource(Route._build_middleware_stack)
    first = source.index(f"all_middlewares.append(app.{validation.SLOT})")
    assert first < source.index("all_middlewares.extend(router_middlewares")


def test_the_resolver_refuses_a_powertools_without_the_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    class Older(APIGatewayHttpResolver):  # a release before the slot existed (3.18 and older)
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            delattr(self, validation.SLOT)

    monkeypatch.setattr(validation, "APIGatewayHttpResolver", Older)
    with pytest.raises(RuntimeError, match=validation.SLOT):
        validation.resolver([])


# ------------------------------------------------------------------ the hooks, as a request sees them


def _app(calls: list[str], deny: bool = False) -> APIGatewayHttpResolver:
    def guard(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response[str]:
        calls.append("guard")
        if deny:
            raise web.HttpError(401, "unauthorized", "credentials required")
        response: Response[str] = next_middleware(app)
        return response

    app = validation.resolver([guard])
    app.exception_handler(Exception)(web.error_reply)  # as api.py: HttpError and the library's errors

    @app.post("/notes")
    def add(note: Note) -> Response[Any]:
        calls.append(f"route:{note.text}")
        return web.reply(200, {"text": note.text})

    return app


def _post(app: APIGatewayHttpResolver, body: str, content_type: str = "application/json") -> tuple[int, Any]:
    event = {
        "version": "2.0",
        "routeKey": "POST /notes",
        "rawPath": "/notes",
        "rawQueryString": "",
        "headers": {"content-type": content_type, "host": "localhost"},
        "requestContext": {
            "http": {"method": "POST", "path": "/notes", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1"},
            "requestId": "req-1",
            "routeKey": "POST /notes",
            "stage": "$default",
        },
        "body": body,
        "isBase64Encoded": False,
    }
    result = app.resolve(event, None)  # type: ignore[arg-type]
    return int(result["statusCode"]), json.loads(result["body"] or "{}")


def test_a_guard_answers_before_validation_sees_the_body() -> None:
    calls: list[str] = []
    status, body = _post(_app(calls, deny=True), '{"text": 5}')
    assert (status, body["error"], calls) == (401, "unauthorized", ["guard"])  # not validation's 400


def test_the_body_is_parsed_strictly_whatever_its_label() -> None:
    calls: list[str] = []
    app = _app(calls)
    # `curl -d` labels JSON as a form: Powertools would parse it as one; _get_body reads it as JSON
    assert _post(app, '{"text": "hi"}', "application/x-www-form-urlencoded") == (200, {"text": "hi"})
    assert calls == ["guard", "route:hi"]
    status, body = _post(app, '{"text": "hi", "size": NaN}')  # json.loads and pydantic take NaN
    assert (status, body["error"]) == (400, "invalid_input")
    assert "finite" in body["message"], body
    assert _post(app, '{"text": "hi",}')[1]["error"] == "bad_json"  # the strict parser's code
    status, body = _post(app, '{"text": 5}')
    assert (status, body["error"]) == (400, "invalid_input")
    assert body["message"].startswith("text:")
