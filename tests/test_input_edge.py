"""Input hygiene at the HTTP edge (DESIGN.md "Input hygiene", "Errors"; issue 7 item 6, issue 10).

Every JSON route, on SQLite and on DynamoDB (moto): invalid UTF-8, lone surrogates (keys and
values), JSON nested deeper than 64 levels and non-finite numbers are 400 ``invalid_input`` and
change nothing: the raw store dump is identical, the pending item stays open, no tool ran. The same
request with a harmless value in place of the bad one is then accepted, so it is the bad value, not
the request around it, that was refused. Ids not in the product's format are 404 ``not_found``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.domain.base.ids import new_id
from loopengine.http import api
from tests.edge_support import STORES, Edge, installed, message_event, pause, send
from tests.handler_support import call as http
from tests.handler_support import load_event, with_body

BAD_FRAGMENTS = {
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "overflow 1e999": "1e999",
    "overflow -1e999": "-1e999",
    "lone high surrogate": '"\\ud800"',
    "lone low surrogate": '"x\\udfffy"',
    "reversed pair": '"\\ude00\\ud83d"',
    "surrogate key": '{"\\udbff": 1}',
    "deep 65": "[" * 65 + "]" * 65,
    "deep 100k arrays": "[" * 100_000 + "]" * 100_000,
    "deep 40k objects": '{"a":' * 40_000 + "1" + "}" * 40_000,
    "deep inside a string is fine, then deep for real": '["[[[[", ' + "[" * 70 + "]" * 70 + "]",
}
HARMLESS = '["fine", 1.5, "\\ud83d\\ude00", ' + "[" * 62 + "]" * 62 + "]"  # 64 deep in a body; a valid pair
BAD_BYTES = {
    "invalid UTF-8": b"\xff\xfe",
    "encoded surrogate": b"\xed\xa0\x80",
    "overlong slash": b"\xc0\xaf",
    "truncated sequence": b"\xe2\x82",
}


@pytest.fixture(params=STORES)
def edge(request: pytest.FixtureRequest, tmp_path: Path, handler_env: dict[str, str]) -> Iterator[Edge]:
    with installed(request.param, tmp_path) as made:
        yield made


def _b64_event(event: dict[str, Any], raw: bytes) -> dict[str, Any]:
    event = dict(event)
    event["body"] = base64.b64encode(raw).decode()
    event["isBase64Encoded"] = True
    return event


def resolve_event(pending_id: str, body: Any, route: str = "resolve") -> dict[str, Any]:
    name = "resolve_approve" if route == "resolve" else "answer_question"
    return with_body(load_event(name, pendingId=pending_id), body)


def assert_refused(
    edge: Edge, event: dict[str, Any], before: list[str], case: str, status: int = 400
) -> None:
    got, body = http(api.handler, event)
    assert got == status, (case, got, body)
    assert body["error"] == ("invalid_input" if status == 400 else "not_found"), (case, body)
    assert "Traceback" not in body["message"]
    assert edge.dump() == before, f"{case}: the store changed"
    assert edge.calls.log == [], f"{case}: a tool ran"


def bad_events(template: str, make: Callable[[str], dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(case, event) for every bad kind, the bad value placed where ``template`` says FRAG.

    Fragments go in as JSON text; bad bytes go in a base64-encoded body, as API Gateway sends them.
    """
    for case, fragment in BAD_FRAGMENTS.items():
        yield case, make(template.replace("FRAG", fragment))
    for case, raw in BAD_BYTES.items():
        body = template.replace("FRAG", '"BYTES"').encode().replace(b"BYTES", raw)
        yield f"{case} (base64 body)", _b64_event(make("{}"), body)


# -- every JSON route, every bad kind, both stores -----------------------------------------------


def test_messages_route_refuses_every_bad_kind_and_supersedes_nothing(edge: Edge) -> None:
    # GIVEN a turn parked in session cust-1 (a new message to cust-1 would supersede it)
    paused = pause(sessionId="cust-1")
    before, open_before = edge.dump(), edge.open_ids()
    template = '{"message": "refund A-1001", "sessionId": "cust-1", "context": FRAG}'
    for case, event in bad_events(template, message_event):
        # WHEN a message carries the bad value THEN 400 and nothing changed
        assert_refused(edge, event, before, case)
    # AND a lone surrogate the event's text itself carries (no JSON escape)
    assert_refused(edge, message_event('{"message": "refund \ud800 A-1001"}'), before, "raw surrogate")
    assert edge.open_ids() == open_before == {paused["pendingItems"][0]["pendingId"]}
    # AND the same message with a harmless value is accepted (and supersedes the parked turn)
    status, body = send(template.replace("FRAG", HARMLESS))
    assert status == 202 and body["sessionId"] == "cust-1", body
    assert paused["pendingItems"][0]["pendingId"] not in edge.open_ids()


@pytest.mark.parametrize("route", ["resolve", "answer"])
def test_resolve_and_answer_refuse_every_bad_kind_and_the_item_stays_open(edge: Edge, route: str) -> None:
    paused = pause("a question about my order" if route == "answer" else "refund A-1001")
    pending = paused["pendingItems"][0]["pendingId"]
    before = edge.dump()
    first = '"decision": "approve"' if route == "resolve" else '"answer": "A-1001"'
    template = "{" + first + ', "context": FRAG}'
    for case, event in bad_events(template, lambda b: resolve_event(pending, b, route)):
        assert_refused(edge, event, before, case)
    raw = resolve_event(pending, "{" + first + ', "comment": "\udc80"}', route)
    assert_refused(edge, raw, before, "raw surrogate")
    assert pending in edge.open_ids()
    # AND the harmless twin decides the item
    got, body = http(api.handler, resolve_event(pending, template.replace("FRAG", HARMLESS), route))
    assert got in (200, 202) and body["resolved"] is True, body
    assert pending not in edge.open_ids()


# -- the reported cases ----------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["tenant", "sessionId"])
@pytest.mark.parametrize("raw", [False, True], ids=["escaped", "raw"])
def test_lone_surrogate_in_tenant_or_session_is_400_and_leaves_nothing_running(
    edge: Edge, field: str, raw: bool
) -> None:
    # GIVEN an empty store. WHEN the message names a tenant/sessionId with a lone surrogate
    # (it used to give 500 on SQLite, 503 on DynamoDB, and leave the turn running)
    before = edge.dump()
    body = {"message": "refund A-1001", "sessionId": "cust-7", field: "acme\ud800"}
    text = json.dumps(body, ensure_ascii=not raw)  # raw: the surrogate itself in the event text
    status, reply = send(text)
    # THEN 400 naming the field, and no turn, session or checkpoint exists
    assert (status, reply["error"]) == (400, "invalid_input"), reply
    assert field in reply["message"] or raw
    assert edge.dump() == before
    # AND the session is not stuck: the next good message to it is served
    status, ok = send({"message": "refund A-1001", "sessionId": "cust-7", "tenant": "acme"})
    assert status == 202 and ok["status"] == "paused", ok


def test_nested_json_100k_deep_is_400_not_a_recursion_error(edge: Edge) -> None:
    before = edge.dump()
    for deep in ("[" * 100_000, "[" * 100_000 + "]" * 100_000, '{"message": ' + "[" * 100_000):
        status, reply = send(deep)
        assert (status, reply["error"]) == (400, "invalid_input"), reply
        assert "nested deeper than 64" in reply["message"]
    assert edge.dump() == before


@pytest.mark.parametrize("amount", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_amount_in_edited_args_never_reaches_the_deny_rule_or_the_tool(edge: Edge, amount: str) -> None:
    # GIVEN a refund parked for approval, and the rule "amount gt 10000 -> deny"
    pending = pause()["pendingItems"][0]["pendingId"]
    before = edge.dump()
    # WHEN an approver sends NaN as the edited amount (nan > 10000 is False: it used to pass the rule)
    edit = '{"decision": "approve", "editedArgs": {"order_id": "A-1001", "amount": %s, "reason": "x"}}'
    assert_refused(edge, resolve_event(pending, edit % amount), before, amount)
    status, reply = http(api.handler, resolve_event(pending, edit % amount))
    assert "editedArgs.amount" in reply["message"] and status == 400
    # THEN the item is still open, and the rule still denies a real large amount
    assert pending in edge.open_ids()
    status, reply = http(api.handler, resolve_event(pending, edit % "20000"))
    assert status == 403 and edge.calls.log == [] and pending in edge.open_ids(), reply
    # AND a sane edit runs the tool with exactly that amount
    status, reply = http(api.handler, resolve_event(pending, edit % "150"))
    assert status in (200, 202), reply
    assert edge.calls.log == [("issue_refund", {"order_id": "A-1001", "amount": 150, "reason": "x"})]


# -- client-chosen ids -----------------------------------------------------------------------------

BAD_CLIENT_IDS = [
    "\x00nul",
    "tab\there",
    "new\nline",
    "a b",
    "-leading-dash",
    ".hidden",
    "x" * 129,
    "caf\u00e9",
    "emoji\U0001f600",
    "slash/inside",
    7,
    ["list"],
]
GOOD_CLIENT_IDS = [
    "cust-1",
    "user@example.com",
    "org:team.1",
    "A",
    "x" * 128,
    "ses_" + "0123456789abcdef" * 2,
]


@pytest.mark.parametrize("field", ["sessionId", "tenant"])
@pytest.mark.parametrize("value", BAD_CLIENT_IDS, ids=repr)
def test_client_ids_of_a_bad_form_are_400_naming_the_field(
    tmp_path: Path, handler_env: dict[str, str], field: str, value: Any
) -> None:
    with installed("sqlite", tmp_path) as edge:
        before = edge.dump()
        status, reply = send({"message": "refund A-1001", field: value})
        assert (status, reply["error"]) == (400, "invalid_input"), reply
        assert field in reply["message"]
        assert edge.dump() == before


@pytest.mark.parametrize("value", GOOD_CLIENT_IDS)
def test_client_ids_of_the_accepted_form_work_and_can_be_read_back(
    tmp_path: Path, handler_env: dict[str, str], value: str
) -> None:
    with installed("sqlite", tmp_path):
        paused = pause(sessionId=value, tenant=value)
        assert paused["sessionId"] == value
        event = _session_event(value)  # session ids are scoped by tenant: the operator names it
        event["queryStringParameters"] = {"tenant": value}
        event["rawQueryString"] = f"tenant={value}"
        status, history = http(api.handler, event)
        assert status == 200 and history["sessionId"] == value


# -- path ids: the product's format or 404 -------------------------------------------------------


def _session_event(session_id: str) -> dict[str, Any]:
    return load_event("get_session", ses_00000000000000000000000000000000=session_id)


def _turn_event(name: str, turn_id: str) -> dict[str, Any]:
    return load_event(name, turnId=turn_id)


def test_pending_ids_not_in_our_format_are_404_and_decide_nothing(edge: Edge) -> None:
    paused = pause()
    pending, turn_id = paused["pendingItems"][0]["pendingId"], paused["turnId"]
    before = edge.dump()
    malformed = [
        turn_id,  # a turnId pasted into a pendingId route
        "pnd_123",
        pending.upper(),
        "PND_" + pending[4:],
        pending + "0",
        pending[:-1],
        pending.replace("pnd_", "pnd-"),
        pending + "%20",
        "pnd_" + "g" * 32,
    ]
    for bad in malformed:
        for route, body in (("resolve", {"decision": "approve"}), ("answer", {"answer": "x"})):
            assert_refused(edge, resolve_event(bad, body, route), before, f"{route} {bad}", status=404)
    assert pending in edge.open_ids()
    # AND a well-formed pendingId that is unknown stays alreadyResolved (its pointer may be long gone)
    unknown = new_id("pnd_")
    assert http(api.handler, resolve_event(unknown, {"decision": "approve"})) == (
        200,
        {"alreadyResolved": True},
    )
    assert http(api.handler, resolve_event(unknown, {"answer": "x"}, "answer")) == (
        200,
        {"alreadyResolved": True},
    )


def test_turn_ids_not_in_our_format_are_404_and_cancel_nothing(edge: Edge) -> None:
    paused = pause()
    pending, turn_id = paused["pendingItems"][0]["pendingId"], paused["turnId"]
    before = edge.dump()
    for bad in (pending, turn_id.upper(), "trn_1", turn_id + "x", "trn_doesnotexist"):
        assert_refused(edge, _turn_event("cancel_turn", bad), before, f"cancel {bad}", status=404)
        assert_refused(edge, _turn_event("get_turn", bad), before, f"get {bad}", status=404)
    assert pending in edge.open_ids()
    status, turn = http(api.handler, _turn_event("get_turn", turn_id))
    assert status == 200 and turn["status"] == "paused"


def test_session_ids_not_in_our_format_are_404(edge: Edge) -> None:
    paused = pause(sessionId="cust-9")
    for bad in ("-x", "a%20b", "x" * 129, "%ED%A0%80", "caf%C3%A9"):
        status, reply = http(api.handler, _session_event(bad))
        assert (status, reply["error"]) == (404, "not_found"), (bad, reply)
    assert http(api.handler, _session_event("cust-9"))[0] == 200
    assert http(api.handler, _session_event(paused["sessionId"]))[0] == 200


# -- query strings and paths ----------------------------------------------------------------------


def test_lone_surrogates_in_the_query_or_path_are_400_before_any_route(edge: Edge) -> None:
    pending = pause()["pendingItems"][0]["pendingId"]
    before = edge.dump()
    listing = load_event("list_pending")
    listing["queryStringParameters"] = {"tenant": "acme\udc00"}
    assert_refused(edge, listing, before, "list tenant")
    listing["queryStringParameters"] = {"\ud800": "x"}
    assert_refused(edge, listing, before, "list key")
    resolve = resolve_event(pending, {"decision": "approve"})
    resolve["queryStringParameters"] = {"wait": "1\ud800"}
    assert_refused(edge, resolve, before, "resolve wait")
    session = _session_event("cust-1")
    session["rawPath"] = session["requestContext"]["http"]["path"] = "/sessions/\udfff"
    assert_refused(edge, session, before, "session path")
    assert pending in edge.open_ids()
