"""Magic links: the token (loopengine.channels.magic.token) and the pages behind GET/POST /magic/{token}.

Handler tests go through ``api.handler`` with ``events/magic_get.json`` / ``magic_post.json`` (a real
token substituted for the placeholder). Forms are submitted the way a browser would: every control of
the rendered page, with textarea newlines sent as CRLF.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopengine.app.engine import Engine
from loopengine.app.invokers import InlineInvoker
from loopengine.channels.magic.token import (
    InvalidMagicLink,
    MagicClaims,
    MagicLinkReason,
    issue_token,
    magic_url,
    verify_token,
)
from loopengine.domain.base.errors import InvalidInput, StoreError
from loopengine.domain.decisions import Approve
from loopengine.domain.policy import Expiry
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.http import api
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.handler_support import FakeContext, InstallRoot, lambda_context, load_event, with_body
from tests.handler_support import call as http
from tests.harness import Build, Calls, Harness, agent

SECRET = "magic-test-secret-0123456789"
PLACEHOLDER = "mgc_00000000000000000000000000000000"
REVIEWER = "reviewer@example.com"
NOW = 1_800_000_000.0


# --- the token --------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _signed(payload: bytes, secret: str = SECRET) -> str:
    """A token with an arbitrary (correctly signed) payload."""
    return f"{_b64(payload)}.{_b64(hmac.new(secret.encode(), payload, hashlib.sha256).digest())}"


def _reason(token: str, secret: str = SECRET, now: float = NOW) -> MagicLinkReason:
    with pytest.raises(InvalidMagicLink) as caught:
        verify_token(secret, token, now)
    return caught.value.reason


def test_token_round_trip() -> None:
    token = issue_token(SECRET, "pnd_abc", REVIEWER, NOW + 3600.7)
    assert re.fullmatch(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+", token)
    assert verify_token(SECRET, token, NOW) == MagicClaims("pnd_abc", REVIEWER, NOW + 3600)
    payload = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert payload == {"p": "pnd_abc", "r": REVIEWER, "e": int(NOW) + 3600}


def test_tampered_payload_is_a_bad_signature() -> None:
    token = issue_token(SECRET, "pnd_abc", REVIEWER, NOW + 3600)
    _payload, mac = token.split(".")
    other = json.dumps({"p": "pnd_other", "r": REVIEWER, "e": int(NOW) + 3600}, separators=(",", ":"))
    assert _reason(f"{_b64(other.encode())}.{mac}") is MagicLinkReason.BAD_SIGNATURE
    longer = json.dumps({"p": "pnd_abc", "r": REVIEWER, "e": int(NOW) + 10**9}, separators=(",", ":"))
    assert _reason(f"{_b64(longer.encode())}.{mac}") is MagicLinkReason.BAD_SIGNATURE


def test_tampered_signature_is_a_bad_signature() -> None:
    token = issue_token(SECRET, "pnd_abc", REVIEWER, NOW + 3600)
    payload, mac = token.split(".")
    flipped = bytearray(base64.urlsafe_b64decode(mac + "="))
    flipped[0] ^= 1
    assert _reason(f"{payload}.{_b64(bytes(flipped))}") is MagicLinkReason.BAD_SIGNATURE
    assert _reason(f"{payload}.{_b64(b'short')}") is MagicLinkReason.BAD_SIGNATURE


def test_wrong_secret_is_a_bad_signature() -> None:
    token = issue_token("another-secret", "pnd_abc", REVIEWER, NOW + 3600)
    assert _reason(token) is MagicLinkReason.BAD_SIGNATURE


def test_expiry_is_checked_only_for_an_authentic_token() -> None:
    token = issue_token(SECRET, "pnd_abc", REVIEWER, NOW + 60)
    assert verify_token(SECRET, token, NOW + 59.9).pending_id == "pnd_abc"
    assert _reason(token, now=NOW + 60) is MagicLinkReason.EXPIRED
    assert _reason(token, now=NOW + 86_400) is MagicLinkReason.EXPIRED
    forged = issue_token("not-ours", "pnd_abc", REVIEWER, NOW - 60)
    assert _reason(forged) is MagicLinkReason.BAD_SIGNATURE


@pytest.mark.parametrize(
    "token",
    [
        "",
        "abc",
        "a.b.c",
        ".",
        "abc.",
        ".abc",
        "!!!!.abcd",
        "YWJj.YWJj=",
        "YWJj+.YWJj",
        "YWJk.YWJj/",
        "YWI=.YWJj",
        "YWJ.YWJj",  # non-canonical: trailing bits set
        "é.YWJj",
        "a" * 3000 + ".b",
    ],
)
def test_malformed_tokens(token: str) -> None:
    assert _reason(token) is MagicLinkReason.MALFORMED


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1,2]",
        b'{"p":"x","r":"y"}',
        b'{"p":"","r":"y","e":1900000000}',
        b'{"p":"x","r":"","e":1900000000}',
        b'{"p":1,"r":"y","e":1900000000}',
        b'{"p":"x","r":"y","e":true}',
        b'{"p":"x","r":"y","e":"1900000000"}',
        b"\xff\xfe",
    ],
)
def test_authentic_but_unreadable_payloads_are_malformed(payload: bytes) -> None:
    assert _reason(_signed(payload)) is MagicLinkReason.MALFORMED


def test_invalid_magic_link_is_invalid_input() -> None:
    assert issubclass(InvalidMagicLink, InvalidInput)


@pytest.mark.parametrize(
    "args",
    [("", "p", "r", NOW), (SECRET, "", "r", NOW), (SECRET, "p", "", NOW), (SECRET, "p", "r", float("inf"))],
)
def test_issue_token_refuses_empty_parts(args: tuple[str, str, str, float]) -> None:
    with pytest.raises(ValueError):
        issue_token(*args)


def test_verify_needs_a_secret() -> None:
    with pytest.raises(ValueError):
        verify_token("", issue_token(SECRET, "p", "r", NOW + 1), NOW)


def test_magic_url() -> None:
    assert magic_url("https://x.example/prod/", "a.b") == "https://x.example/prod/magic/a.b"


@settings(max_examples=200, deadline=None)
@given(
    pending_id=st.text(min_size=1, max_size=80),
    recipient=st.text(min_size=1, max_size=80),
    ttl=st.integers(min_value=1, max_value=10**8),
    position=st.integers(min_value=0),
    replacement=st.sampled_from("AQgw-_09azZ."),
)
def test_any_ids_round_trip_and_any_change_breaks_the_token(
    pending_id: str, recipient: str, ttl: int, position: int, replacement: str
) -> None:
    token = issue_token(SECRET, pending_id, recipient, NOW + ttl)
    assert re.fullmatch(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+", token)
    assert verify_token(SECRET, token, NOW) == MagicClaims(pending_id, recipient, NOW + ttl)
    i = position % len(token)
    changed = token[:i] + replacement + token[i + 1 :]
    if changed != token:
        with pytest.raises(InvalidMagicLink):
            verify_token(SECRET, changed, NOW)


# --- pages: helpers ----------------------------------------------------------------------------


@dataclass
class Page:
    status: int
    headers: dict[str, str]
    html: str

    @property
    def state(self) -> str:
        found = re.search(r'<main data-state="([^"]*)"', self.html)
        assert found, self.html
        return found.group(1)

    def form(self) -> FormReader:
        reader = FormReader()
        reader.feed(self.html)
        reader.close()
        return reader

    def submit(self, decision: str | None = "approve", **changes: str) -> dict[str, str]:
        """What a browser sends: every control's value, with ``changes`` (by control name) typed in."""
        reader = self.form()
        values = dict(reader.values)
        for name, value in changes.items():
            assert name in values, (name, sorted(values))
            values[name] = value
        for name in reader.textareas:  # browsers normalise textarea newlines to CRLF when submitting
            values[name] = values[name].replace("\r\n", "\n").replace("\n", "\r\n")
        if decision is not None:
            values["decision"] = decision
        return values


@dataclass
class FormReader(HTMLParser):
    values: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    options: dict[str, list[str]] = field(default_factory=dict)
    textareas: set[str] = field(default_factory=set)
    buttons: list[tuple[str, str]] = field(default_factory=list)
    _textarea: str | None = None
    _select: str | None = None

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        name = a.get("name") or ""
        if tag == "input" and name:
            self.values[name] = a.get("value") or ""
            self.types[name] = a.get("type") or "text"
        elif tag == "textarea":
            self._textarea = name
            self.values[name] = ""
            self.types[name] = "textarea"
            self.textareas.add(name)
        elif tag == "select":
            self._select = name
            self.types[name] = "select"
            self.options[name] = []
        elif tag == "option" and self._select is not None:
            value = a.get("value") or ""
            self.options[self._select].append(value)
            if "selected" in a:
                self.values[self._select] = value
        elif tag == "button" and name and "disabled" not in a:
            self.buttons.append((name, a.get("value") or ""))

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self.values[self._textarea] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea" and self._textarea is not None:
            text = self.values[self._textarea]
            self.values[self._textarea] = text[1:] if text.startswith("\n") else text
            self._textarea = None
        elif tag == "select" and self._select is not None:
            if self._select not in self.values and self.options[self._select]:
                self.values[self._select] = self.options[self._select][0]
            self._select = None


def _respond(event: dict[str, Any]) -> Page:
    result = api.handler(event, lambda_context(FakeContext()))
    headers = {k.lower(): v for k, v in (result.get("headers") or {}).items()}
    body = result.get("body") or ""
    if result.get("isBase64Encoded"):
        body = base64.b64decode(body).decode()
    return Page(int(result["statusCode"]), headers, body)


def get_page(token: str) -> Page:
    return _respond(load_event("magic_get", **{PLACEHOLDER: token}))


def post_page(token: str, form: dict[str, str] | None = None, base64_body: bool = False) -> Page:
    event = load_event("magic_post", **{PLACEHOLDER: token})
    if form is not None:
        event["body"] = urlencode(form)
    if base64_body:
        event["body"] = base64.b64encode(event["body"].encode()).decode()
        event["isBase64Encoded"] = True
    return _respond(event)


def assert_html(page: Page) -> None:
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["x-frame-options"] == "DENY"
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "style-src 'unsafe-inline'" in csp and "script" not in csp
    assert '<meta name="robots" content="noindex">' in page.html
    assert "<script" not in page.html.lower()
    assert "Traceback" not in page.html


def snapshot(engine: Engine, pending_id: str) -> dict[str, Any]:
    """Everything a GET could have changed."""
    cp = engine.rt.stores.checkpoints.find_by_pending(pending_id)
    assert cp is not None
    turn = engine.turn(cp.turn_id)
    return {
        "checkpoint": cp.to_dict(),
        "turn": turn.to_dict(),
        "events": engine.rt.stores.turns.events(cp.turn_id),
        "calls": {k: v.to_dict() for k, v in engine.rt.stores.turns.calls(cp.turn_id).items()},
    }


def decided(engine: Engine, turn_id: str) -> list[dict[str, Any]]:
    return [e for e in engine.rt.stores.turns.events(turn_id) if e["type"] == "decided"]


def is_open(engine: Engine, pending_id: str) -> bool:
    cp = engine.rt.stores.checkpoints.find_by_pending(pending_id)
    return cp is not None and not cp.closed and pending_id in cp.outstanding


# --- pages: the customer-service agent ---------------------------------------------------------


@pytest.fixture
def cs(install_root: InstallRoot) -> Engine:
    """The bundled customer-service agent through root.build, resumes run inline."""
    return install_root(lambda engine: InlineInvoker(engine.resume), LOOPENGINE_MAGIC_LINK_SECRET=SECRET)


def pause_refund() -> dict[str, Any]:
    status, body = http(api.handler, load_event("post_message"))
    assert status == 202, body
    return body


def token_for(engine: Engine, pending_id: str, recipient: str = REVIEWER, ttl: float = 3600) -> str:
    return issue_token(SECRET, pending_id, recipient, engine.rt.stores.clock.now() + ttl)


def refund_runs(engine: Engine, turn_id: str) -> list[dict[str, Any]]:
    """The refunds that ran: their call records, their results from the session (stored once, there)."""
    turn = engine.turn(turn_id)
    results = {
        r.tool_use_id: r for m in engine.rt.stores.sessions.load(turn.session_key) for r in m.tool_results
    }
    runs = [c for c in engine.rt.stores.turns.calls(turn_id).values() if c.tool == "issue_refund"]
    out = [json.loads(results[c.tool_use_id].content) for c in runs if c.outcome == "ok"]
    return [r.get("result", r) if "reviewer_edited_args" in r else r for r in out]


def test_get_shows_the_pending_call_as_a_form(cs: Engine) -> None:
    paused = pause_refund()
    item = paused["pendingItems"][0]
    page = get_page(token_for(cs, item["pendingId"]))
    assert page.status == 200 and page.state == "form"
    assert_html(page)
    assert "customer-service" in page.html and "issue_refund" in page.html
    assert item["reason"] in page.html and REVIEWER in page.html
    form = page.form()
    assert form.types["arg.order_id"] == "text" and form.values["arg.order_id"] == "A-1001"
    assert form.types["arg.amount"] == "number" and float(form.values["arg.amount"]) == 212.0
    assert form.values["arg.reason"] == "arrived broken"
    assert form.types["argsHash"] == "hidden" and form.values["argsHash"] == item["argsHash"]
    assert form.types["comment"] == "textarea"
    assert ("decision", "approve") in form.buttons and ("decision", "deny") in form.buttons


def test_get_changes_nothing_even_repeated(cs: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    before = snapshot(cs, pending)
    for _ in range(3):
        assert get_page(token).status == 200
    assert snapshot(cs, pending) == before
    assert is_open(cs, pending)


def test_approve_unchanged_resumes_and_records_the_recipient(cs: Engine) -> None:
    paused = pause_refund()
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    page = post_page(token, get_page(token).submit("approve"))
    assert page.status == 200 and page.state == "approved", page.html
    assert_html(page)
    assert "the agent is resuming" in page.html.lower()
    # the refund ran once with the model's own args; the turn resumed and paused on the email
    assert refund_runs(cs, turn_id) == [
        {"amount": 212.0, "order_id": "A-1001", "refund_id": refund_runs(cs, turn_id)[0]["refund_id"]}
        | {"status": "issued"}
    ]
    out = cs.outcome(turn_id)
    assert out.status is TurnStatus.PAUSED and [p.tool for p in out.pending] == ["send_email"]
    [event] = decided(cs, turn_id)
    assert event["decidedBy"] == f"email:{REVIEWER}" and event["channel"] == "magic-link"
    assert event["decision"] == "approve" and event["edited"] is False
    cp = cs.rt.stores.checkpoints.find_by_pending(pending)
    assert cp is not None
    [record] = [d for d in cp.decisions if d.pending_id == pending]
    assert record.decided_by == f"email:{REVIEWER}" and record.channel == "magic-link"
    assert isinstance(record, Approve)
    assert record.edited_args is None


def test_sample_post_event_approves_with_its_comment(cs: Engine) -> None:
    paused = pause_refund()
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    page = post_page(token_for(cs, pending))  # events/magic_post.json exactly, token substituted
    assert page.status == 200 and page.state == "approved"
    [event] = decided(cs, turn_id)
    assert event["comment"] == "Approved from the email link." and event["edited"] is False


def test_base64_encoded_form_body(cs: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    page = post_page(token, get_page(token).submit("approve", **{"arg.amount": "50"}), base64_body=True)
    assert page.state == "approved"
    assert refund_runs(cs, paused["turnId"])[0]["amount"] == 50.0


def test_deny_with_a_comment(cs: Engine) -> None:
    paused = pause_refund()
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    form = get_page(token).submit("deny", comment="Too much: offer a voucher.\nThanks")
    page = post_page(token, form)
    assert page.status == 200 and page.state == "denied", page.html
    assert "Too much: offer a voucher." in page.html
    turn = cs.turn(turn_id)
    assert turn.status is TurnStatus.FINISHED and turn.stop_reason is StopReason.DENIED
    assert refund_runs(cs, turn_id) == []
    [event] = decided(cs, turn_id)
    assert event["decision"] == "deny" and event["comment"] == "Too much: offer a voucher.\nThanks"
    assert event["decidedBy"] == f"email:{REVIEWER}" and event["channel"] == "magic-link"


def test_edited_amount_runs_with_the_edit(cs: Engine) -> None:
    paused = pause_refund()
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    page = post_page(token, get_page(token).submit("approve", **{"arg.amount": "100"}))
    assert page.state == "approved" and "with your edits" in page.html
    [refund] = refund_runs(cs, turn_id)
    assert refund["amount"] == 100.0
    [event] = decided(cs, turn_id)
    assert event["edited"] is True
    cp = cs.rt.stores.checkpoints.find_by_pending(pending)
    assert cp is not None
    [record] = [d for d in cp.decisions if d.pending_id == pending]
    assert isinstance(record, Approve)
    assert record.edited_args == {"order_id": "A-1001", "amount": 100.0, "reason": "arrived broken"}
    # the chained email pauses again; the model heard about the edited amount
    out = cs.outcome(turn_id)
    assert out.pending[0].tool == "send_email" and "100.00" in out.pending[0].args["body"]


def test_invalid_edit_shows_the_form_again_and_the_item_stays_open(cs: Engine) -> None:
    paused = pause_refund()
    turn_id, pending = paused["turnId"], paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    before = snapshot(cs, pending)
    page = post_page(token, get_page(token).submit("approve", **{"arg.amount": "lots"}))
    assert page.status == 400 and page.state == "form"
    assert_html(page)
    assert "amount" in page.html and 'role="alert"' in page.html
    assert page.form().values["arg.amount"] == "lots"  # what they typed is kept for fixing
    assert snapshot(cs, pending) == before and is_open(cs, pending)
    # fixing it works: the same link is still good
    page = post_page(token, page.submit("approve", **{"arg.amount": "99.5"}))
    assert page.state == "approved"
    assert refund_runs(cs, turn_id)[0]["amount"] == 99.5


@pytest.mark.parametrize("amount", ["", "nan", "inf", "1e999"])
def test_non_numbers_are_400(cs: Engine, amount: str) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    page = post_page(token, get_page(token).submit("approve", **{"arg.amount": amount}))
    assert page.status == 400 and page.state == "form" and is_open(cs, pending)


def test_deny_ignores_broken_edits(cs: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    page = post_page(token, get_page(token).submit("deny", **{"arg.amount": "lots"}))
    assert page.state == "denied"


def test_args_hash_mismatch_is_409_with_the_current_request(cs: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    form = get_page(token).submit("approve", argsHash="sha256:what-i-saw-was-different")
    page = post_page(token, form)
    assert page.status == 409 and page.state == "form"
    assert "this request changed since the page was loaded" in page.html.lower()
    assert page.form().values["argsHash"] == paused["pendingItems"][0]["argsHash"]
    assert is_open(cs, pending)


def test_missing_or_unknown_decision_is_400(cs: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    for form in (get_page(token).submit(None), get_page(token).submit("maybe")):
        page = post_page(token, form)
        assert page.status == 400 and page.state == "form" and is_open(cs, pending)


@pytest.mark.parametrize("body", ["%%%", "decision", "&&&=", '{"decision": "approve"}', "a=" + "x" * 300_000])
def test_garbage_bodies_never_500(cs: Engine, body: str) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    event = with_body(load_event("magic_post", **{PLACEHOLDER: token_for(cs, pending)}), body)
    page = _respond(event)
    assert page.status in (400, 413), page.status
    assert_html(page)
    assert is_open(cs, pending)


def test_bad_base64_body_is_400(cs: Engine) -> None:
    paused = pause_refund()
    event = load_event("magic_post", **{PLACEHOLDER: token_for(cs, paused["pendingItems"][0]["pendingId"])})
    event["body"], event["isBase64Encoded"] = "!!!not base64", True
    page = _respond(event)
    assert page.status == 400
    assert_html(page)


def test_late_click_after_supersede_says_superseded(cs: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    stale_form = get_page(token).submit("approve")
    body = {"message": "Order A-1002: where is it?", "sessionId": paused["sessionId"]}
    status, _ = http(api.handler, with_body(load_event("post_message"), body))
    assert status == 200
    for page in (get_page(token), post_page(token, stale_form)):
        assert page.status == 200 and page.state == "superseded", page.html
        assert "superseded — the user moved on with a new message" in page.html.lower()
        assert "<form" not in page.html
    assert refund_runs(cs, paused["turnId"]) == []


def test_cancelled_turn_says_cancelled(cs: Engine) -> None:
    paused = pause_refund()
    token = token_for(cs, paused["pendingItems"][0]["pendingId"])
    status, _ = http(api.handler, load_event("cancel_turn", turnId=paused["turnId"]))
    assert status == 200
    page = get_page(token)
    assert page.state == "cancelled" and "cancelled" in page.html.lower()


def test_already_resolved_elsewhere_says_who(cs: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    stale_form = get_page(token).submit("deny")
    status, _ = http(api.handler, load_event("resolve_approve", pendingId=pending))
    assert status == 202
    for page in (get_page(token), post_page(token, stale_form)):
        assert page.status == 200 and page.state == "already-resolved"
        assert "already resolved: approved by user:admin via api" in page.html.lower()
    assert len(decided(cs, paused["turnId"])) == 1  # the late deny decided nothing


def test_a_second_click_is_already_resolved(cs: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending)
    form = get_page(token).submit("approve")
    assert post_page(token, form).state == "approved"
    again = post_page(token, form)
    assert again.state == "already-resolved" and REVIEWER in again.html
    assert len(refund_runs(cs, paused["turnId"])) == 1


def test_expired_token_is_410(cs: Engine) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    token = token_for(cs, pending, ttl=-1)
    for page in (get_page(token), post_page(token)):
        assert page.status == 410 and page.state == "link-expired"
        assert_html(page)
        assert "expired" in page.html
    assert is_open(cs, pending)


@pytest.mark.parametrize("kind", ["placeholder", "tampered", "other-secret"])
def test_bad_token_is_400(cs: Engine, kind: str) -> None:
    paused = pause_refund()
    pending = paused["pendingItems"][0]["pendingId"]
    good = token_for(cs, pending)
    token = {
        "placeholder": PLACEHOLDER,
        "tampered": good[:-2] + ("AA" if not good.endswith("AA") else "BB"),
        "other-secret": issue_token("someone-else", pending, "mallory@example.com", 2e9),
    }[kind]
    for page in (get_page(token), post_page(token)):
        assert page.status == 400 and page.state == "invalid-link"
        assert_html(page)
    assert is_open(cs, pending)


def test_magic_links_off_without_a_secret(cs: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    paused = pause_refund()
    token = token_for(cs, paused["pendingItems"][0]["pendingId"])
    monkeypatch.delenv("LOOPENGINE_MAGIC_LINK_SECRET")
    page = get_page(token)
    assert page.status == 404 and page.state == "disabled"


def test_unknown_pending_id_is_already_resolved(cs: Engine) -> None:
    page = get_page(token_for(cs, "pnd_never_handed_out"))
    assert page.status == 200 and page.state == "already-resolved"
    assert post_page(token_for(cs, "pnd_never_handed_out")).state == "already-resolved"


@pytest.mark.parametrize("error,status", [(StoreError("table unavailable"), 503), (RuntimeError("bug"), 500)])
def test_backend_failures_are_pages_without_details(
    cs: Engine, monkeypatch: pytest.MonkeyPatch, error: Exception, status: int
) -> None:
    paused = pause_refund()
    token = token_for(cs, paused["pendingItems"][0]["pendingId"])

    def broken(_pending_id: str) -> Any:
        raise error

    monkeypatch.setattr(cs.rt.stores.checkpoints, "find_by_pending", broken)
    for page in (get_page(token), post_page(token)):
        assert page.status == status and page.state == "error"
        assert_html(page)
        assert "table unavailable" not in page.html and "bug" not in page.html


def test_json_routes_still_answer_json(cs: Engine) -> None:
    event = load_event("health")
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/magic"
    status, body = http(api.handler, event)
    assert status == 401 and body["error"] == "unauthorized"  # not under the public /magic/ prefix
    event = load_event("magic_get", **{PLACEHOLDER: "x.y"})
    event["requestContext"]["http"]["method"] = "DELETE"
    status, body = http(api.handler, event)
    assert status == 404 and body["error"] == "not_found"
    assert http(api.handler, load_event("health")) == (200, {"status": "ok"})


# --- pages: agents built in code (escaping, schemas, questions, approvers, expiry) -------------


@pytest.fixture
def build(install_harness: Build, monkeypatch: pytest.MonkeyPatch) -> Build:
    monkeypatch.setenv("LOOPENGINE_MAGIC_LINK_SECRET", SECRET)
    return install_harness


ASK = {"rules": [], "default_decision": "ask"}
RICH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "minimum": 1},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "mode": {"type": "string", "enum": ["fast", "safe"]},
        "level": {"enum": [1, 2, 3]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "subject": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "body": {"type": "string"},
        "note": {"type": "string"},
    },
    "required": ["count", "mode"],
    "additionalProperties": False,
}
RICH_ARGS: dict[str, Any] = {
    "count": 3,
    "ratio": 0.5,
    "flag": True,
    "mode": "safe",
    "level": 2,
    "tags": ["a", "b"],
    "subject": None,
    "body": "Dear customer,\n\n  indented line\nregards",
}


def parked(build: Build, args: dict[str, Any], schema: dict[str, Any] | None = None, **kw: Any) -> Any:
    calls = Calls()
    tool = calls.tool("rich", schema or RICH_SCHEMA)
    h = build(
        agent("rich-agent", [tool], kw.pop("rules", ASK), **kw),
        model=ScriptedModel.from_list([call(use("rich", args)), say("done")]),
    )
    out = h.engine.send_message("rich-agent", "go")
    assert out.status is TurnStatus.PAUSED
    return h, calls, out.turn_id, out.pending[0]


def harness_token(h: Harness, pending_id: str, recipient: str = REVIEWER, ttl: float = 3600) -> str:
    return issue_token(SECRET, pending_id, recipient, h.clock.now() + ttl)


def test_every_schema_type_gets_its_control_and_an_untouched_form_is_no_edit(build: Build) -> None:
    h, calls, turn_id, item = parked(build, RICH_ARGS)
    token = harness_token(h, item.pending_id)
    page = get_page(token)
    form = page.form()
    assert form.types["arg.count"] == "number" and form.values["arg.count"] == "3"
    assert form.types["arg.ratio"] == "number"
    assert form.types["arg.flag"] == "select" and form.values["arg.flag"] == "true"
    assert form.types["arg.mode"] == "select" and form.options["arg.mode"] == ["fast", "safe"]
    assert form.values["arg.mode"] == "safe"
    assert form.types["arg.level"] == "select" and form.values["arg.level"] == "2"
    assert form.types["arg.tags"] == "textarea" and json.loads(form.values["arg.tags"]) == ["a", "b"]
    assert form.types["arg.subject"] == "text" and form.values["arg.subject"] == ""
    assert form.types["arg.body"] == "textarea" and form.values["arg.body"] == RICH_ARGS["body"]
    assert form.values["arg.note"] == ""  # absent, and stays absent when left blank
    result = post_page(token, page.submit("approve"))
    assert result.state == "approved", result.html
    assert calls.log == [("rich", RICH_ARGS)]
    assert decided(h.engine, turn_id)[0]["edited"] is False


def test_edits_are_coerced_to_the_schema_types(build: Build) -> None:
    h, calls, _turn_id, item = parked(build, RICH_ARGS)
    token = harness_token(h, item.pending_id)
    changes = {
        "arg.count": "7",
        "arg.ratio": "2",
        "arg.flag": "false",
        "arg.mode": "fast",
        "arg.level": "3",
        "arg.tags": '["x"]',
        "arg.subject": "Hello",
        "arg.note": "added",
    }
    page = post_page(token, get_page(token).submit("approve", **changes))
    assert page.state == "approved", page.html
    [(_, ran)] = calls.log
    assert ran == {
        **RICH_ARGS,
        "count": 7,
        "ratio": 2.0,
        "flag": False,
        "mode": "fast",
        "level": 3,
        "tags": ["x"],
        "subject": "Hello",
        "note": "added",
    }
    assert type(ran["count"]) is int and type(ran["level"]) is int


@pytest.mark.parametrize(
    "changes,mentions",
    [
        ({"arg.count": "0"}, "count"),  # the schema's minimum, checked by the engine
        ({"arg.count": "1.5"}, "count"),
        ({"arg.tags": "[not json"}, "tags"),
        ({"arg.tags": '"a string"'}, "tags"),
        ({"arg.mode": "turbo"}, "mode"),
        ({"arg.flag": "maybe"}, "flag"),
    ],
)
def test_invalid_edits_are_400_and_decide_nothing(
    build: Build, changes: dict[str, str], mentions: str
) -> None:
    h, calls, _turn_id, item = parked(build, RICH_ARGS)
    token = harness_token(h, item.pending_id)
    page = post_page(token, get_page(token).submit("approve", **changes))
    assert page.status == 400 and page.state == "form", page.html
    assert mentions in page.html
    assert calls.log == [] and is_open(h.engine, item.pending_id)


def test_a_value_its_control_cannot_hold_is_shown_as_json(build: Build) -> None:
    schema = {"type": "object", "properties": {"count": {"type": "integer"}}}
    h, calls, turn_id, item = parked(build, {"count": 3.0}, schema)  # JSON Schema: 3.0 is an integer
    token = harness_token(h, item.pending_id)
    page = get_page(token)
    assert page.form().types["arg.count"] == "textarea"
    assert post_page(token, page.submit("approve")).state == "approved"
    assert calls.log == [("rich", {"count": 3.0})]
    assert decided(h.engine, turn_id)[0]["edited"] is False


def test_model_and_recipient_content_is_escaped_everywhere(build: Build) -> None:
    evil = "<script>alert(1)</script>"
    args = {**RICH_ARGS, "body": f"{evil}\n\"quoted\" & 'single'", "tags": [evil], "mode": "safe"}
    rules = {"rules": [{"tool": "rich", "decision": "ask", "reason": f"rule says {evil}"}]}
    h, _calls, turn_id, item = parked(build, args, rules={**rules, "default_decision": "ask"})
    recipient = f"{evil}@example.com"
    token = harness_token(h, item.pending_id, recipient)
    page = get_page(token)
    assert page.status == 200
    assert_html(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.html
    assert page.form().values["arg.body"] == args["body"]  # round-trips through the escaping
    result = post_page(token, page.submit("approve", comment=evil))
    assert result.state == "approved"
    assert_html(result)
    assert decided(h.engine, turn_id)[0]["decidedBy"] == f"email:{recipient}"
    late = get_page(token)  # the closed page names the decider, escaped
    assert late.state == "already-resolved"
    assert_html(late)
    assert "&lt;script&gt;" in late.html


def test_pending_question_is_answered_through_the_link(build: Build) -> None:
    question = {"question": "Refund or replacement?", "options": ["refund", "replacement"]}
    model = ScriptedModel.from_list([call(use("system_ask_user", question)), say("ok")])
    h = build(agent("asker", [Calls().tool("x")], ASK), model=model)
    out = h.engine.send_message("asker", "my order broke")
    assert out.stop_reason is StopReason.PENDING_QUESTION
    pending = out.pending[0].pending_id
    token = harness_token(h, pending)
    page = get_page(token)
    assert page.state == "form" and "Refund or replacement?" in page.html
    assert ("choice", "refund") in page.form().buttons
    empty = post_page(token, {"decision": "answer", "answer": "  "})
    assert empty.status == 400 and is_open(h.engine, pending)
    done = post_page(token, {"choice": "replacement", "answer": ""})
    assert done.state == "answered", done.html
    [event] = decided(h.engine, out.turn_id)
    assert event["decision"] == "answer" and event["decidedBy"] == f"email:{REVIEWER}"
    assert event["channel"] == "magic-link"
    assert h.engine.turn(out.turn_id).stop_reason is StopReason.END_TURN
    assert get_page(token).state == "already-resolved"


def test_a_recipient_who_is_not_an_approver_gets_403(build: Build) -> None:
    rules = {"rules": [{"tool": "rich", "decision": "ask", "approvers": ["email:alice@example.com"]}]}
    h, calls, turn_id, item = parked(build, RICH_ARGS, rules={**rules, "default_decision": "ask"})
    mallory = harness_token(h, item.pending_id, "mallory@example.com")
    assert get_page(mallory).status == 403
    page = post_page(mallory, {"decision": "approve"})
    assert page.status == 403 and page.state == "forbidden"
    assert calls.log == [] and is_open(h.engine, item.pending_id)
    alice = harness_token(h, item.pending_id, "alice@example.com")
    assert post_page(alice, get_page(alice).submit("approve")).state == "approved"
    assert decided(h.engine, turn_id)[0]["decidedBy"] == "email:alice@example.com"


def test_an_expired_item_says_expired_and_get_still_changes_nothing(build: Build) -> None:
    h, calls, turn_id, item = parked(build, RICH_ARGS, expiry=Expiry(3600.0))
    token = harness_token(h, item.pending_id, ttl=7 * 86_400)
    form = get_page(token).submit("approve")
    h.clock.advance(2 * 3600)
    before = snapshot(h.engine, item.pending_id)
    page = get_page(token)
    assert page.state == "expired" and "nobody answered in time" in page.html
    assert snapshot(h.engine, item.pending_id) == before
    late = post_page(token, form)
    assert late.state == "expired", late.html
    assert calls.log == []
    assert [e["type"] for e in h.rt.stores.turns.events(turn_id)].count("expired") == 1
    assert h.engine.turn(turn_id).status is TurnStatus.FINISHED
