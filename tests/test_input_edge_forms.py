"""Input hygiene on the form routes (magic-link POST, Slack interactions) and in ``domain/jsonsafe``.

The form routes get the same rules as the JSON routes: the body must be UTF-8 (a ``%``-escape
too), hold no lone surrogate, and any JSON inside it (a magic-link JSON field, Slack's ``payload``)
is strict JSON. Refused requests decide nothing. Properties (hypothesis) pin ``parse_json`` down:
it accepts exactly the JSON values the product accepts, and anything else is ``InvalidInput``.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopengine.channels.magic.token import SECRET_ENV as MAGIC_SECRET_ENV
from loopengine.channels.magic.token import issue_token
from loopengine.channels.slack import routes as slack_handler
from loopengine.channels.slack.interact import sign_slack
from loopengine.domain.base import jsonsafe
from loopengine.domain.base.errors import InvalidInput
from loopengine.http import api
from tests.edge_support import Edge, installed, pause, send
from tests.handler_support import FakeContext, lambda_context, load_event

MAGIC_SECRET = "edge-magic-secret-0123456789"
SLACK_SECRET = "edge-slack-secret-0123456789abcd"
REVIEWER = "reviewer@example.com"
SLACK_USER = "U0ALICE"
SLACK_TEAM = "T0EDGE"


@pytest.fixture
def edge(tmp_path: Path, handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Edge]:
    monkeypatch.setenv(MAGIC_SECRET_ENV, MAGIC_SECRET)
    monkeypatch.setenv(slack_handler.SECRET_ENV, SLACK_SECRET)
    monkeypatch.setenv(slack_handler.TEAM_ENV, SLACK_TEAM)
    with installed("sqlite", tmp_path) as made:
        yield made


def _answer(event: dict[str, Any]) -> tuple[int, str]:
    result = api.handler(event, lambda_context(FakeContext()))
    return int(result["statusCode"]), str(result.get("body") or "")


# -- magic links -----------------------------------------------------------------------------------


def magic_post(edge: Edge, pending_id: str, body: str | bytes) -> dict[str, Any]:
    token = issue_token(MAGIC_SECRET, pending_id, REVIEWER, edge.engine.rt.stores.clock.now() + 3600)
    event = load_event("magic_post", mgc_00000000000000000000000000000000=token)
    if isinstance(body, bytes):
        event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode(), True
    else:
        event["body"], event["isBase64Encoded"] = body, False
    return event


BAD_MAGIC_FORMS: dict[str, str | bytes] = {
    "%-escaped lone surrogate": "decision=approve&comment=%ED%A0%80",
    "%-escaped invalid UTF-8": "decision=approve&comment=ok%FF",
    "%-escaped overlong": "decision=approve&comment=%C0%AF",
    "invalid UTF-8 bytes (base64)": b"decision=approve&comment=\xff\xfe",
    "lone surrogate in the event text": "decision=approve&comment=\ud800",
    "NaN in a JSON field": "decision=approve&arg.tags=" + quote("[NaN]"),
    "Infinity in a JSON field": "decision=approve&arg.tags=" + quote('["a", Infinity]'),
    "1e999 in a JSON field": "decision=approve&arg.tags=" + quote("[1e999]"),
    "escaped surrogate in a JSON field": "decision=approve&arg.tags=" + quote('["\\ud800"]'),
    "JSON field 70 deep": "decision=approve&arg.tags=" + quote("[" * 70 + "]" * 70),
    "NaN amount": "decision=approve&arg.amount=NaN",
}


def test_magic_post_refuses_bad_forms_and_decides_nothing(edge: Edge) -> None:
    pending = pause()["pendingItems"][0]["pendingId"]
    before = edge.dump()
    for case, body in BAD_MAGIC_FORMS.items():
        status, page = _answer(magic_post(edge, pending, body))
        assert status == 400, (case, status, page[:300])
        assert "Traceback" not in page
        assert edge.dump() == before, f"{case}: the store changed"
    assert pending in edge.open_ids() and edge.calls.log == []
    # AND the harmless twin of the JSON field decides it, with exactly those tags
    status, page = _answer(magic_post(edge, pending, "decision=approve&arg.tags=" + quote('["a"]')))
    assert status == 200, page[:300]
    assert edge.calls.log == [
        ("issue_refund", {"order_id": "A-1001", "amount": 212.0, "reason": "arrived broken", "tags": ["a"]})
    ]


def test_magic_get_with_a_surrogate_in_the_token_is_400(edge: Edge) -> None:
    event = load_event("magic_get", mgc_00000000000000000000000000000000="mgc_\ud800")
    status, _ = _answer(event)
    assert status == 400


# -- Slack -----------------------------------------------------------------------------------------


def slack_event(edge: Edge, body: bytes, b64: bool = False) -> dict[str, Any]:
    """events/slack_interaction.json carrying ``body``, correctly signed now."""
    now = int(edge.engine.rt.stores.clock.now())
    event = load_event("slack_interaction")
    event["body"] = base64.b64encode(body).decode() if b64 else body.decode("utf-8", "surrogatepass")
    event["isBase64Encoded"] = b64
    event["headers"] = {
        **event["headers"],
        "content-length": str(len(body)),
        "x-slack-request-timestamp": str(now),
        "x-slack-signature": sign_slack(SLACK_SECRET, body, now),
    }
    return event


def click_json(pending_id: str, extra: str = "") -> str:
    user = json.dumps({"id": SLACK_USER, "username": "alice"})
    actions = json.dumps([{"type": "button", "action_id": "approve", "value": f"approve:{pending_id}"}])
    team = json.dumps({"id": SLACK_TEAM})
    return f'{{"type": "block_actions", "user": {user}, "team": {team}, "actions": {actions}{extra}}}'


def test_slack_refuses_bad_payloads_and_decides_nothing(edge: Edge) -> None:
    pending = pause()["pendingItems"][0]["pendingId"]
    before = edge.dump()
    bad_payloads = {
        "NaN": ', "x": NaN',
        "-Infinity": ', "x": -Infinity',
        "1e999": ', "x": 1e999',
        "escaped surrogate": ', "x": "\\udc00"',
        "surrogate key": ', "\\ud800": 1',
        "deep 30k": ', "x": ' + "[" * 30_000 + "]" * 30_000,
    }
    cases: dict[str, dict[str, Any]] = {
        case: slack_event(edge, urlencode({"payload": click_json(pending, extra)}).encode())
        for case, extra in bad_payloads.items()
    }
    cases["%-escaped invalid UTF-8"] = slack_event(edge, b"payload=%FF" + quote(click_json(pending)).encode())
    cases["invalid UTF-8 (base64)"] = slack_event(edge, b"payload=\xff", b64=True)
    for case, event in cases.items():
        status, text = _answer(event)
        assert status == 400 and json.loads(text)["error"] == "invalid_input", (case, status, text[:300])
        assert edge.dump() == before, f"{case}: the store changed"
    assert pending in edge.open_ids()
    # AND the same click without the bad value is decided
    status, text = _answer(
        slack_event(edge, urlencode({"payload": click_json(pending, ', "x": 1')}).encode())
    )
    assert status == 200 and "Approved" in text, text[:300]
    assert pending not in edge.open_ids()


# -- parse_json: unit cases and properties -------------------------------------------------------


def test_depth_64_is_accepted_and_65_refused() -> None:
    assert jsonsafe.parse_json("[" * 64 + "]" * 64) is not None
    with pytest.raises(InvalidInput, match="nested deeper than 64"):
        jsonsafe.parse_json("[" * 65 + "]" * 65)
    assert jsonsafe.parse_json('["' + "[" * 1000 + '"]') == ["[" * 1000]  # brackets in strings do not count
    assert jsonsafe.parse_json('["\\"[[[", "\\\\"]') == ['"[[[', "\\"]


def test_syntax_errors_are_bad_json_and_the_rest_invalid_input() -> None:
    for text in ("{", "[1,]", "", "nul", '{"a" 1}', "[" * 10 + "]" * 9):
        with pytest.raises(jsonsafe.BadJson):
            jsonsafe.parse_json(text)
    with pytest.raises(InvalidInput) as info:
        jsonsafe.parse_json(b'{"a": "\xff"}')
    assert not isinstance(info.value, jsonsafe.BadJson)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _acceptable(value: Any) -> bool:
    """What the edge must accept: finite numbers, surrogate-free strings and keys, depth <= 64."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in item):
            return False
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        if isinstance(item, list):
            stack.extend(item)
    return _depth(value) <= jsonsafe.MAX_DEPTH


ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF)  # lone surrogates included
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(ANY_CHAR, max_size=8)


def _nest(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(ANY_CHAR, max_size=4), inner, max_size=3)


JSON_VALUES = st.recursive(SCALARS, _nest, max_leaves=20)


def _nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


DEEP = st.builds(_nested, st.integers(min_value=60, max_value=70), SCALARS)  # around the limit


@given(value=JSON_VALUES | DEEP, ascii_only=st.booleans())
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_property_parse_json_accepts_exactly_the_acceptable_values(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, allow_nan=True)
    if _acceptable(value):
        assert jsonsafe.parse_json(text) == value or value != value
        if ascii_only or not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
            assert jsonsafe.parse_json(text.encode("utf-8")) == value
    else:
        with pytest.raises(InvalidInput):
            jsonsafe.parse_json(text)


@given(raw=st.binary(max_size=64) | st.text(ANY_CHAR, max_size=64))
def test_property_anything_is_a_value_or_invalid_input(raw: bytes | str) -> None:
    try:
        value = jsonsafe.parse_json(raw)
    except InvalidInput:
        return
    assert _acceptable(value)


@given(
    bad=st.sampled_from(["NaN", "-Infinity", "1e400", '"\\udfff"', "[" * 65 + "]" * 65]),
    where=st.integers(0, 2),
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_property_a_bad_value_anywhere_in_a_message_changes_nothing(edge: Edge, bad: str, where: int) -> None:
    before = edge.dump()
    places = [
        '{"message": "refund A-1001", "x": BAD}',
        '{"message": "refund A-1001", "meta": {"deep": [1, {"k": BAD}]}}',
        '{"tenant": "acme", "message": "refund A-1001", "list": [BAD, 1]}',
    ]
    status, reply = send(places[where].replace("BAD", bad))
    assert (status, reply["error"]) == (400, "invalid_input")
    assert edge.dump() == before
