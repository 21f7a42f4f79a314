"""The OpenAPI document, run against ``loopengine dev`` (issue 9 "Contract tests from the spec").

schemathesis fetches ``GET /openapi.json`` from a real ``loopengine dev`` subprocess (admin Basic
auth) and, per operation, generates a bounded number of requests from the document: no 5xx, every
status code documented, every body valid for its schema (``additionalProperties: false`` on
responses, so drift fails), auth enforced where declared, invalid data rejected.
"""

from __future__ import annotations

import functools
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis.errors import Unsatisfiable

from tests.dev_support import AUTH, DevProcess, admin_env, free_port

DOC = Path(__file__).resolve().parent.parent / "docs" / "openapi.json"
MAX_EXAMPLES = 15
"""Generated requests per operation and mode (positive: valid per the document; negative: not)."""
REJECTED = ["400", "401", "403", "404", "409", "413"]
"""What refusing invalid data may answer here (413: a body over the size limit is refused unread)."""
HOP_BY_HOP = {"transfer-encoding", "content-length", "connection", "te", "upgrade"}
"""Headers that frame the HTTP message: a generated value tests the server in front, not the API."""
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]
"""What a valid request may answer (schemathesis's default plus 422: an Idempotency-Key already used with
another body is refused whatever the request's form, so a valid request depends on what came before)."""
CONFIG = {
    # The test sends its own Authorization: a generated one (valid or not) never goes out, and a
    # negative case whose only invalid part it was tested nothing (half the negative cases were)
    "generation": {"with-security-parameters": False},
    "checks": {
        "negative_data_rejection": {"expected-statuses": REJECTED},
        "positive_data_acceptance": {"expected-statuses": ACCEPTED},
    },
}
pytestmark = pytest.mark.xdist_group("openapi-spec")
"""One worker runs the module: one ``loopengine dev``, and schemathesis compiles each of the document's
patterns once (a ``maxLength: 100000`` pattern takes its regex engine over a second of CPU to refuse)."""
DOCUMENT = json.loads(DOC.read_text())
"""The committed document as read (schemathesis gets a copy of its own: it may rewrite what it holds)."""
LABELS = sorted(
    f"{method.upper()} {path}"
    for path, item in DOCUMENT["paths"].items()
    for method in item
    if method in {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
)
"""Each operation as schemathesis labels it (checked below), read without it: collecting this module in
a pytest-xdist worker that runs none of its tests then costs no schemathesis import."""


@functools.cache
def operations() -> dict[str, Any]:
    """schemathesis's operations of the document, by label."""
    import schemathesis

    schema = schemathesis.openapi.from_dict(
        json.loads(DOC.read_text()), config=schemathesis.Config.from_dict(CONFIG)
    )
    from schemathesis.core.result import Ok

    found: dict[str, Any] = {}
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # an operation schemathesis could not read
        found[result.ok().label] = result.ok()
    return found


def test_the_labels_are_schemathesiss() -> None:
    assert sorted(operations()) == LABELS


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    tmp = tmp_path_factory.mktemp("spec-dev")
    srv = DevProcess(admin_env(tmp / "dev.db"), free_port(), tmp / "dev.log")
    srv.start()
    yield srv
    srv.stop()


def test_the_server_serves_the_committed_document(server: DevProcess) -> None:
    req = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/openapi.json", headers={"Authorization": AUTH}
    )
    with urllib.request.urlopen(req, timeout=20) as resp:
        assert json.loads(resp.read()) == json.loads(DOC.read_text())


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("mode_name", ["positive", "negative"])
def test_every_operation_conforms_to_the_document(server: DevProcess, label: str, mode_name: str) -> None:
    from schemathesis import GenerationMode

    mode = GenerationMode(mode_name)
    base_url = f"http://127.0.0.1:{server.port}"
    seen = []

    @given(case=operations()[label].as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def run(case: Any) -> None:
        if mode is GenerationMode.NEGATIVE and _valid_as_sent(case):
            reject()  # what goes over the wire is valid (schemathesis false positive): not a negative case
        if HOP_BY_HOP & {name.lower() for name in case.headers or {}}:
            reject()  # framing, not the API: API Gateway answers it before any route (dev: 411)
        seen.append(case)
        case.call_and_validate(base_url=base_url, headers=_headers(case))

    try:
        run()
    except Unsatisfiable:  # nothing in this operation's document can be violated (no constraints)
        assert mode is GenerationMode.NEGATIVE and not seen, label
    else:
        assert seen, "no request was generated"


def _valid_as_sent(case: Any) -> bool:
    """Whether a negative case is valid once sent: its only invalid parts vanish on the wire.

    The test replaces ``Authorization`` (a credential is always sent), a query value of another
    JSON type (``["x"]``, ``0``) goes over the wire as its text, which may match the parameter's
    pattern, and an empty list or object is not sent at all (an object goes as its keys). Such a
    case tests nothing negative; any other invalid part keeps it. (CI found a case whose only
    invalid parts were an ``Authorization`` of the wrong form beside generated extra headers, and
    ``tenant=[]``: it was answered 200; then the same with ``tenant={}``.)
    """
    from schemathesis import GenerationMode
    from schemathesis.core.parameters import ParameterLocation

    negative = {loc for loc, info in case.meta.components.items() if info.mode is GenerationMode.NEGATIVE}
    if negative - {ParameterLocation.HEADER, ParameterLocation.QUERY}:
        return False
    if ParameterLocation.HEADER in negative:
        # Undeclared headers are allowed extras, never the invalid part; of the declared ones only
        # Authorization may be invalid (it is replaced), and none that is required may be missing.
        declared = {p["name"].lower(): p for p in _parameters(case) if p.get("in") == "header"}
        sent = {name.lower() for name in case.headers or {}}
        required = {name for name, p in declared.items() if p.get("required")}
        if (sent & set(declared)) - {"authorization"} or required - sent - {"authorization"}:
            return False
    declared = {p["name"]: p["schema"] for p in _parameters(case) if p.get("in") == "query"}
    for name, value in (case.query or {}).items():
        if name not in declared or not _text_matches(declared[name], value):
            return False
    return True


def _parameters(case: Any) -> list[dict[str, Any]]:
    operation = DOCUMENT["paths"][case.operation.path][case.method.lower()]
    return list(operation.get("parameters", []))


def _text_matches(schema: dict[str, Any], value: Any) -> bool:
    """Whether ``value`` as a query string carries it is valid for a ``string | null`` parameter."""
    # a list goes as one value per item, a mapping as its keys (an empty one: not at all)
    values = list(value) if isinstance(value, list | dict) else [value]
    if values in ([None], []):
        return True  # not sent at all: every query parameter here is optional
    if len(values) != 1 or isinstance(values[0], list | dict):
        return False
    text = str(values[0])
    return any(
        option.get("type") == "string"
        and re.search(option.get("pattern", ""), text) is not None
        and option.get("minLength", 0) <= len(text) <= option.get("maxLength", len(text))
        for option in schema.get("anyOf", [schema])
    )


def _headers(case: Any) -> dict[str, str]:
    """Credentials, and (as any JSON client sends it) a JSON content type on a bodiless JSON POST.

    ``loopengine dev`` refuses a POST to a JSON route without it (a cross-site request guard), which
    API Gateway never sees; form routes (magic links, Slack) get their own content type.
    """
    from schemathesis.core import NOT_SET

    headers = {"Authorization": AUTH}
    if (
        case.method.upper() == "POST"
        and case.body is NOT_SET
        and not case.path.startswith(("/magic", "/integ"))
    ):
        headers["Content-Type"] = "application/json"
    return headers


@pytest.mark.parametrize("label", LABELS)
def test_the_documented_examples_conform(server: DevProcess, label: str) -> None:
    """The document's examples (a real agent, a real message) reach the paths random data misses."""
    base_url = f"http://127.0.0.1:{server.port}"
    for strategy in operations()[label].get_strategies_from_examples():

        @given(case=strategy)
        @settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def run(case: Any) -> None:
            case.call_and_validate(base_url=base_url, headers=_headers(case))

        run()
