"""The typed API (issue 9): models validate requests and responses, in DESIGN.md's error shape.

Powertools validates every route against :mod:`loopengine.app.api_models`; these tests pin what the
house adds around it: auth before validation (a stranger learns nothing from a bad body), strict
JSON before any model, 400 ``invalid_input`` naming the field (never a 422), 404 for ids of the
wrong form, and a response that drifts from its model is caught (500, logged), not sent. The
committed ``docs/openapi.json`` must be what the code generates.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, get_args

import pytest

from loopengine.app import api_models as m
from loopengine.app import views
from loopengine.app.engine import ApprovalScope, Engine
from loopengine.app.invokers import RecordingInvoker
from loopengine.domain.decisions import HumanVerdict
from loopengine.http import api, openapi
from tests.design_routes import (
    NO_DESIGN_MD,
    PUBLIC_ROUTES,
    design_md_routes,
    served_routes,
    template_routes,
)
from tests.handler_support import (
    FakeContext,
    InstallRoot,
    call,
    lambda_context,
    load_event,
    with_auth,
    with_body,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "openapi.json"
TEMPLATE_ROUTES = template_routes()
DESIGN_MD_ROUTES = design_md_routes()
BEING_BUILT: dict[str, str] = {}
"""Declared routes the app does not serve yet: strict xfails, so each flips to a failure when it lands."""


def _declared_routes() -> list[Any]:
    """One param per route each source declares; DESIGN.md's half is skipped, visibly, without it."""
    params = []
    for source, routes in (("template.yaml", TEMPLATE_ROUTES), ("DESIGN.md", DESIGN_MD_ROUTES)):
        if routes is None:
            params.append(pytest.param(source, "", marks=pytest.mark.skip(reason=NO_DESIGN_MD), id=source))
            continue
        for route in sorted(routes):
            marks = (
                [pytest.mark.xfail(strict=True, reason=BEING_BUILT[route])] if route in BEING_BUILT else []
            )
            params.append(pytest.param(source, route, marks=marks, id=f"{source}: {route}"))
    return params


@pytest.fixture
def engine(install_root: InstallRoot) -> Engine:
    return install_root(lambda _engine: RecordingInvoker())


def _pending() -> str:
    status, body = call(api.handler, load_event("post_message"))
    assert status == 202, body
    pending: str = body["pendingItems"][0]["pendingId"]
    return pending


def _get(path: str, user: str | None = "admin") -> dict[str, Any]:
    event = with_auth(load_event("health"), user)
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    result: dict[str, Any] = api.handler(event, lambda_context(FakeContext()))
    return result


# -- the document ---------------------------------------------------------------------------------


def test_committed_openapi_document_is_current() -> None:
    assert DOC.read_text() == openapi.render(api.app), (
        "docs/openapi.json is out of date: regenerate it with `make openapi` "
        "(.venv/bin/python -m loopengine.http.openapi > docs/openapi.json)"
    )


@pytest.mark.parametrize(("source", "route"), _declared_routes())
def test_every_declared_route_is_served(source: str, route: str) -> None:
    # the expected routes come from template.yaml and DESIGN.md, never from a list of this file's
    assert route in served_routes(api.app), f"{source} declares {route}; the api app does not serve it"


def test_the_app_serves_no_route_that_nothing_declares() -> None:
    declared = TEMPLATE_ROUTES | (DESIGN_MD_ROUTES or frozenset())
    assert served_routes(api.app) - declared == set()


def test_document_covers_every_served_route_with_its_status_codes_and_auth() -> None:
    doc = openapi.document(api.app)
    assert doc["openapi"].startswith("3.1")
    ops = {
        f"{method.upper()} {path}": op for path, item in doc["paths"].items() for method, op in item.items()
    }
    # every route the app serves is documented, except those it keeps out (the document and its UI)
    assert set(ops) == served_routes(api.app, in_schema_only=True)
    assert served_routes(api.app) - set(ops) == {"GET /openapi.json", "GET /docs"}
    assert set(ops["POST /agents/{agent}/messages"]["responses"]) >= {
        "200",
        "202",
        "400",
        "401",
        "404",
        "413",
    }
    resolve = ops["POST /pending-approvals/{pendingId}/resolve"]["responses"]
    assert set(resolve) >= {"200", "202", "400", "401", "403", "404", "409"}
    keyed = {"POST /agents/{agent}/messages", "POST /turns/{turnId}/cancel"}  # take an Idempotency-Key
    with_422 = {key for key, op in ops.items() if "422" in op["responses"]}
    assert with_422 == keyed, "bad input is 400, never Powertools' 422; 422 is idempotency_mismatch only"
    for key in keyed:
        assert "idempotency_mismatch" in ops[key]["responses"]["422"]["description"]
    schemes = doc["components"]["securitySchemes"]
    assert schemes["basicAuth"]["scheme"] == "basic" and schemes["jwt"]["bearerFormat"] == "JWT"
    public = {key for key, op in ops.items() if op.get("security") == [{}]}
    assert public == PUBLIC_ROUTES & set(ops)


def test_openapi_json_and_docs_are_behind_the_api_auth(engine: Engine) -> None:
    for path in ("/openapi.json", "/docs"):
        assert _get(path, None)["statusCode"] == 401
        assert (
            _get(
                path,
                "admin",
            )["statusCode"]
            == 200
        )
    assert json.loads(_get("/openapi.json")["body"]) == openapi.document(api.app)
    page = _get("/docs")
    assert page["headers"]["Content-Type"].startswith("text/html") and "SwaggerUIBundle" in page["body"]
    assert '"/pending-approvals/{pendingId}/resolve"' in page["body"]


# -- requests -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,field",
    [
        ({}, "decision"),
        ({"decision": "maybe"}, "decision"),
        ({"decision": "approve", "editedArgs": [1]}, "editedArgs"),
        ({"decision": "approve", "scope": "forever"}, "scope"),
        ({"decision": "approve", "comment": 5}, "comment"),
        ({"decision": "approve", "argsHash": ["x"]}, "argsHash"),
    ],
)
def test_bad_resolve_bodies_are_400_naming_the_field(
    engine: Engine, body: dict[str, Any], field: str
) -> None:
    pending = _pending()
    status, reply = call(api.handler, with_body(load_event("resolve_approve", pendingId=pending), body))
    assert (status, reply["error"]) == (400, "invalid_input"), reply
    assert field in reply["message"] and set(reply) == {"error", "message"}
    assert engine.outcome(engine.rt.stores.checkpoints.find_by_pending(pending).turn_id).pending  # type: ignore[union-attr]


@pytest.mark.parametrize("query", ["wait=abc", "wait=-1", "wait=26", "wait=nan", "wait=inf"])
def test_bad_wait_is_400_naming_it(engine: Engine, query: str) -> None:
    event = load_event("resolve_approve", pendingId=_pending())
    event["rawQueryString"] = query
    event["queryStringParameters"] = dict([query.split("=")])
    status, reply = call(api.handler, event)
    assert (status, reply["error"]) == (400, "invalid_input") and "wait" in reply["message"], reply


@pytest.mark.parametrize("query", ["tenant=a&tenant=b", "agent=x&%61gent=y", "tenant=&tenant="])
def test_a_query_parameter_given_twice_is_400_not_a_guess(engine: Engine, query: str) -> None:
    # found by the spec run: ?tenant=a&tenant=b was answered for one of them
    event = with_auth(load_event("list_pending"), "admin")
    event["rawQueryString"] = query
    event["queryStringParameters"] = {}
    status, reply = call(api.handler, event)
    assert (status, reply["error"]) == (400, "invalid_input") and "more than once" in reply["message"], reply


def test_a_stranger_with_a_bad_body_gets_401_not_a_validation_error(engine: Engine) -> None:
    pending = _pending()
    for body in ({"decision": "maybe"}, "{not json", "[" * 100):
        event = with_auth(with_body(load_event("resolve_approve", pendingId=pending), body), None)
        status, reply = call(api.handler, event)
        assert (status, reply["error"]) == (401, "unauthorized"), reply


def test_json_routes_take_json_whatever_the_client_labelled_it(engine: Engine) -> None:
    # curl -d sends application/x-www-form-urlencoded; the body is still JSON and read as JSON
    event = load_event("post_message")
    event["headers"] = {**event["headers"], "content-type": "application/x-www-form-urlencoded"}
    status, body = call(api.handler, event)
    assert status == 202 and body["status"] == "paused", body


# -- responses ------------------------------------------------------------------------------------


def test_a_response_that_drifts_from_its_model_is_caught_not_sent(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    pending = _pending()
    real = views.resolution
    monkeypatch.setattr(
        views, "resolution", lambda res: (real(res)[0], {**views.wire(real(res)[1]), "secret": "x"})
    )
    status, reply = call(api.handler, load_event("resolve_approve", pendingId=pending))
    assert (status, reply["error"]) == (500, "internal") and "secret" not in json.dumps(reply)


def test_not_blank_is_the_engines_idea_of_white_space() -> None:
    # found by the spec run: "\u0085" passed the schema's minLength, then the engine's strip() refused it
    blank = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    assert not any(re.search(m.NOT_BLANK, c) for c in blank)
    assert all(re.search(m.NOT_BLANK, c) for c in ("a", "\ufeff", "\u200b", "0"))


def test_the_models_and_the_engine_agree_on_decisions_and_scopes() -> None:
    assert get_args(m.ResolveRequest.model_fields["decision"].annotation) == get_args(HumanVerdict)
    scope = [a for a in get_args(m.ResolveRequest.model_fields["scope"].annotation) if a is not type(None)]
    assert [get_args(a) for a in scope] == [get_args(ApprovalScope)]


@pytest.mark.parametrize(
    "body,says",
    [
        ({"message": "hi", "sessionId": "a b"}, "sessionId: must be 1-128 characters"),
        ({"message": "hi", "tenant": "caf\u00e9"}, "tenant: must be 1-128 characters"),
        ({"message": " \u3000\x85"}, "message: must not be blank"),
    ],
)
def test_pattern_failures_are_said_in_words(engine: Engine, body: dict[str, Any], says: str) -> None:
    status, reply = call(api.handler, with_body(load_event("post_message"), body))
    assert (status, reply["error"]) == (400, "invalid_input") and reply["message"].startswith(says), reply
