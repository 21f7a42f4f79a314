"""The approvals inbox (``GET /inbox``, ``POST /inbox/items/{pendingId}``) through the api handler.

Requests are real API Gateway v2 events (``loopengine.local.dev.to_event``) into ``api.handler``, on an
Engine over SQLite. Forms are submitted as a browser would: every control of the item's form as the
page rendered it, with what the user changed. The world: agent ``shop`` in tenant ``acme`` (and one
in ``globex``), a refund rule that asks, and above 1000 only ``group:refund-managers`` may decide.
Every refusal is checked to have changed nothing in the store and run no tool.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from loopengine.app.invokers import RecordingInvoker
from loopengine.app.ports import ModelRequest, ModelResponse
from loopengine.authoring.tools import ASK_USER
from loopengine.channels.inbox import csrf
from loopengine.domain.principals import Principal
from loopengine.http import api
from loopengine.local.dev import LocalContext, to_event
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests.handler_support import (
    EVENTS,
    PLACEHOLDER_PENDING,
    FakeContext,
    InstallRoot,
    lambda_context,
    load_event,
)
from tests.harness import Build, Calls, Harness, agent

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1:8787"
ORIGIN = f"http://{HOST}"
SECRET = "inbox-test-secret-0123456789"
USERS = [
    {"user": "alice", "password": "a-pw", "tenants": ["acme"]},
    {"user": "bob", "password": "b-pw", "tenants": ["globex"]},
    {"user": "mgr", "password": "m-pw", "tenants": ["acme"], "groups": ["refund-managers"]},
]
CREDENTIALS = {"alice": "alice:a-pw", "bob": "bob:b-pw", "mgr": "mgr:m-pw", "admin": "admin:secret"}
REFUND = {
    "type": "object",
    "properties": {
        "amount": {"type": "number", "description": "in USD"},
        "reason": {"type": "string"},
        "rush": {"type": "boolean"},
    },
    "required": ["amount", "reason"],
    "additionalProperties": False,
}
RULES = {
    "rules": [
        {
            "tool": "refund",
            "when": {"field": "amount", "op": "gt", "value": 1000},
            "decision": "ask",
            "approvers": ["group:refund-managers"],
        },
        {"tool": "refund", "decision": "ask"},
    ],
    "default_decision": "ask",
}
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>"\'&'


def respond(request: ModelRequest) -> ModelResponse:
    """``refund N`` asks for a refund of N (``twice``: two at once); ``ask`` asks a question (``ask
    freely``: one that takes a typed answer besides its options)."""
    last = request.messages[-1]
    if last.tool_results and not last.text:
        return say("done")
    text = last.text or ""
    if text.startswith("ask"):
        question = {"question": f"Which size? {HOSTILE}", "options": ["S", "M", HOSTILE]}
        return call(use(ASK_USER, {**question, "allow_free_text": "freely" in text}))
    amount = float(text.split()[1])
    reason = HOSTILE if "hostile" in text else "arrived broken"
    calls = [use("refund", {"amount": amount, "reason": reason})]
    if "twice" in text:
        calls.append(use("refund", {"amount": amount + 1, "reason": "second"}))
    return call(*calls)


# --- requests and pages -----------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str

    def forms(self) -> dict[str, Form]:
        reader = Forms()
        reader.feed(self.body)
        reader.close()
        return {f.action.rsplit("/", 1)[-1]: f for f in reader.found if f.method == "post"}

    @property
    def state(self) -> str:
        found = re.search(r'<main data-state="([^"]*)"', self.body)
        assert found, self.body
        return found.group(1)

    def shown(self) -> list[str]:
        """The pendingIds of the items the page shows."""
        return re.findall(r'<article class="item" id="item-(pnd_[0-9a-f]{32})"', self.body)


@dataclass
class Form:
    action: str
    method: str
    values: dict[str, str] = field(default_factory=dict)
    textareas: set[str] = field(default_factory=set)
    buttons: list[tuple[str, str]] = field(default_factory=list)

    def submit(
        self, button: tuple[str, str] | None = ("decision", "approve"), /, **typed: str
    ) -> dict[str, str]:
        """What a browser sends when ``button`` is clicked after typing ``typed`` (by control name)."""
        values = dict(self.values)
        for name, value in typed.items():
            assert name in values, (name, sorted(values))
            values[name] = value
        for name in self.textareas:
            values[name] = values[name].replace("\r\n", "\n").replace("\n", "\r\n")
        if button is not None:
            assert button in self.buttons, (button, self.buttons)
            values[button[0]] = button[1]
        return values


class Forms(HTMLParser):
    """Every form of a page, with its controls' values as a browser would submit them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[Form] = []
        self._textarea: str | None = None
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        name = a.get("name", "")
        if tag == "form":
            self.found.append(Form(a.get("action", ""), a.get("method", "get")))
        elif not self.found:
            return
        form = self.found[-1]
        if tag == "input" and name:
            form.values[name] = a.get("value", "")
        elif tag == "textarea":
            self._textarea = name
            form.values[name] = ""
            form.textareas.add(name)
        elif tag == "select":
            self._select = name
        elif tag == "option" and self._select is not None and "selected" in a:
            form.values[self._select] = a.get("value", "")
        elif tag == "button" and name and "disabled" not in a:
            form.buttons.append((name, a.get("value", "")))

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self.found[-1].values[self._textarea] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea" and self._textarea is not None:
            text = self.found[-1].values[self._textarea]
            self.found[-1].values[self._textarea] = text[1:] if text.startswith("\n") else text
            self._textarea = None
        elif tag == "select":
            self._select = None


def send(method: str, path: str, who: str | None, body: bytes = b"", **headers: str) -> Reply:
    sent = {"host": HOST, **{k.replace("_", "-"): v for k, v in headers.items()}}
    if who is not None:
        sent["authorization"] = "Basic " + base64.b64encode(CREDENTIALS[who].encode()).decode()
    result = api.handler(to_event(method, path, sent, body, "127.0.0.1"), lambda_context(LocalContext()))
    out = {k.lower(): v for k, v in (result.get("headers") or {}).items()}
    return Reply(int(result["statusCode"]), out, result.get("body") or "")


def inbox(who: str | None, query: str = "") -> Reply:
    return send("GET", "/inbox" + query, who, accept="text/html")


def post(who: str | None, pending_id: str, form: dict[str, str], **headers: str) -> Reply:
    sent = {"content_type": "application/x-www-form-urlencoded", "origin": ORIGIN, **headers}
    return send("POST", f"/inbox/items/{pending_id}", who, urlencode(form).encode(), **sent)


def message(who: str, text: str, tenant: str = "acme") -> dict[str, Any]:
    body = json.dumps({"message": text, "tenant": tenant}).encode()
    reply = send("POST", "/agents/shop/messages", who, body, content_type="application/json")
    assert reply.status == 202, reply.body
    parsed: dict[str, Any] = json.loads(reply.body)
    return parsed


def dump(h: Harness) -> list[Any]:
    """Every row of every table: a refused post must change none of them."""
    conn = h.rt.stores.sessions.db.connection()  # type: ignore[attr-defined]
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return [(t, conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()) for t in tables]


def decisions(h: Harness, turn_id: str) -> list[dict[str, Any]]:
    return [e for e in h.rt.stores.turns.events(turn_id) if e["type"] == "decided"]


@dataclass
class World:
    h: Harness
    calls: Calls
    small: dict[str, Any]  # acme: a refund of 50 that anyone in acme may decide
    big: dict[str, Any]  # acme: a refund of 5000 that only refund-managers may decide
    other: dict[str, Any]  # globex: a refund of 70

    @staticmethod
    def pending(paused: dict[str, Any], i: int = 0) -> str:
        found: str = paused["pendingItems"][i]["pendingId"]
        return found


@pytest.fixture
def world(install_harness: Build, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.setenv("LOOPENGINE_USERS", json.dumps(USERS))
    monkeypatch.setenv(csrf.SECRET_ENV, SECRET)
    monkeypatch.delenv("LOOPENGINE_MAGIC_LINK_SECRET", raising=False)
    calls = Calls()
    h = install_harness(
        agent("shop", [calls.tool("refund", schema=REFUND)], RULES), model=ScriptedModel(respond)
    )
    small = message("alice", "refund 50")
    h.clock.advance(3 * 3600)
    big = message("alice", "refund 5000")
    other = message("bob", "refund 70", tenant="globex")
    h.clock.advance(120)
    yield World(h, calls, small, big, other)


def test_the_pages_hold_no_inline_code_and_send_the_security_headers(world: World) -> None:
    page = inbox("alice")
    assert page.status == 200 and page.state == "inbox"
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    for directive in (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
    ):
        assert directive in csp
    assert "unsafe" not in csp
    assert page.headers["cache-control"] == "no-store" and page.headers["x-frame-options"] == "DENY"
    assert page.headers["referrer-policy"] == "same-origin"  # no-referrer would send "Origin: null" on posts
    assert page.headers["x-content-type-options"] == "nosniff"
    scripts = re.findall(r"<script\b[^>]*>", page.body)
    assert scripts and all(re.search(r'src="/inbox/static/inbox\.js\?v=[0-9a-f]{12}"', s) for s in scripts)
    assert re.findall(r"<script\b[^>]*>(.*?)</script>", page.body, re.S) == [""] * len(scripts)
    assert "<style" not in page.body and " style=" not in page.body
    assert not re.search(r"\son[a-z]+=", page.body), "an inline event handler"
    for asset, kind in (("inbox.css", "text/css"), ("inbox.js", "text/javascript")):
        served = send("GET", f"/inbox/static/{asset}", "alice")
        assert served.status == 200 and served.headers["content-type"].startswith(kind)
        assert served.headers["x-content-type-options"] == "nosniff" and len(served.body) > 500
    assert send("GET", "/inbox/static/..%2Fcsrf.py", "alice").status == 404
    assert send("GET", "/inbox/static/inbox.css", None).status == 401


def test_without_credentials_the_inbox_is_401_and_asks_the_browser_to_log_in(world: World) -> None:
    for reply in (inbox(None), post(None, world.pending(world.small), {})):
        assert reply.status == 401
        assert reply.headers["www-authenticate"].startswith('Basic realm="loopengine"')
        assert json.loads(reply.body)["error"] == "unauthorized"
    assert (
        "www-authenticate" not in send("GET", "/pending-approvals", None).headers
    )  # the JSON API: no prompt


def test_the_listing_is_scoped_to_the_callers_tenants(world: World) -> None:
    small, big, other = (world.pending(p) for p in (world.small, world.big, world.other))
    alice = inbox("alice")
    assert set(alice.shown()) == {small, big}
    assert "globex" not in alice.body and other not in alice.body
    assert inbox("bob").shown() == [other]
    assert inbox("admin").shown() == []  # the operator names a tenant; without one, the default tenant
    assert set(inbox("admin", "?tenant=acme").shown()) == {small, big}
    assert inbox("alice", "?tenant=globex").status == 403
    # each item: its call, arguments, reason, age and who may decide; the group: oldest and newest age
    assert "refund" in alice.body and "arrived broken" in alice.body and "5000" in alice.body
    assert "oldest waiting 3 h 2 min · newest 2 min" in alice.body
    assert "group:refund-managers" in alice.body and "anyone with access to acme" in alice.body
    # alice is no refund-manager: the big refund is shown without its forms
    assert set(alice.forms()) == {small}
    assert set(inbox("mgr").forms()) == {small, big}


def test_approve_from_the_inbox(world: World) -> None:
    pending, turn = world.pending(world.small), world.small["turnId"]
    form = inbox("alice").forms()[pending]

    reply = post("alice", pending, form.submit(("decision", "approve")))

    assert reply.status == 303, reply.body
    assert reply.headers["location"] == f"/inbox?item={pending}"
    assert world.calls.log == [("refund", {"amount": 50, "reason": "arrived broken"})]
    [decided] = decisions(world.h, turn)
    assert decided["decidedBy"] == "user:alice" and decided["channel"] == "inbox"
    after = inbox("alice", f"?item={pending}")
    assert pending not in after.shown()
    assert re.search(r'class="flash ok"[^>]*data-state="approved"[^>]*>You approved refund', after.body)


def test_deny_with_a_comment(world: World) -> None:
    pending, turn = world.pending(world.small), world.small["turnId"]
    form = inbox("alice").forms()[pending]

    reply = post("alice", pending, form.submit(("decision", "deny"), comment="Not without\nthe receipt"))

    assert reply.status == 303 and world.calls.log == []
    [decided] = decisions(world.h, turn)
    assert decided["decision"] == "deny" and decided["comment"] == "Not without\nthe receipt"
    assert world.h.engine.turn(turn).stop_reason.value == "denied"  # type: ignore[union-attr]


def test_edit_the_arguments_then_approve(world: World) -> None:
    pending = world.pending(world.small)
    form = inbox("alice").forms()[pending]
    assert form.values["arg.amount"] == "50.0" and form.values["arg.rush"] == ""

    reply = post("alice", pending, form.submit(**{"arg.amount": "25", "arg.rush": "true"}))

    assert reply.status == 303, reply.body
    assert world.calls.log == [("refund", {"amount": 25, "reason": "arrived broken", "rush": True})]
    flash = inbox("alice", f"?item={pending}").body
    assert "You approved refund with your edits" in flash


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ({"arg.amount": "a lot"}, "amount: enter a number"),
        ({"arg.amount": ""}, "amount: a value is required"),
        ({"arg.rush": "maybe"}, "rush: choose true or false"),
        ({"arg.amount": "5000"}, "refund-managers"),  # the edited call is re-gated: alice may not
    ],
)
def test_a_refused_edit_decides_nothing_and_shows_the_form_again(
    world: World, typed: dict[str, str], says: str
) -> None:
    pending = world.pending(world.small)
    form = inbox("alice").forms()[pending]
    before = dump(world.h)

    reply = post("alice", pending, form.submit(**typed))

    assert reply.status in (400, 403), reply.body
    assert says in reply.body and 'role="alert"' in reply.body
    assert dump(world.h) == before and world.calls.log == []
    again = reply.forms()[pending]  # the item first, with what was typed (a select shows "(not set)")
    assert all(again.values[k] == (v if k != "arg.rush" else "") for k, v in typed.items()), again.values
    assert re.search(
        r'<section class="attention">\s*<h2>Not decided</h2>\s*<article[^>]*' + pending, reply.body
    )


def test_answer_a_question(world: World) -> None:
    asked = message("alice", "ask")
    pending = world.pending(asked)
    form = inbox("alice").forms()[pending]
    assert ("choice", "S") in form.buttons and ("choice", HOSTILE) in form.buttons

    reply = post("alice", pending, form.submit(("choice", HOSTILE)))

    assert reply.status == 303, reply.body
    [decided] = decisions(world.h, asked["turnId"])
    assert decided["decision"] == "answer" and decided["channel"] == "inbox"
    out = world.h.engine.outcome(asked["turnId"])
    assert out.stop_reason is not None and out.stop_reason.value == "end_turn"
    assert "You answered" in inbox("alice", f"?item={pending}").body


def test_an_empty_answer_is_refused(world: World) -> None:
    pending = world.pending(message("alice", "ask freely"))
    before = dump(world.h)
    reply = post("alice", pending, inbox("alice").forms()[pending].submit(("decision", "answer")))
    assert reply.status == 400 and "Write an answer" in reply.body and dump(world.h) == before


def _token_cases(world: World) -> list[tuple[str, dict[str, str]]]:
    pending = world.pending(world.small)
    form = inbox("alice").forms()[pending].submit()
    other_item = inbox("alice").forms()[world.pending(world.small)].values["csrf"]
    mgr_token = inbox("mgr").forms()[pending].values["csrf"]  # the same item, another principal's page
    big_token = inbox("mgr").forms()[world.pending(world.big)].values["csrf"]
    assert other_item == form["csrf"] and mgr_token != form["csrf"]
    return [
        ("missing", {k: v for k, v in form.items() if k != "csrf"}),
        ("empty", {**form, "csrf": ""}),
        ("wrong", {**form, "csrf": form["csrf"][:-2] + ("AA" if form["csrf"][-2:] != "AA" else "BB")}),
        ("another principal's", {**form, "csrf": mgr_token}),
        ("another item's", {**form, "csrf": big_token}),
        ("not ascii", {**form, "csrf": "é" * 43}),
        ("another key's", {**form, "csrf": csrf.issue(b"k" * 32, Principal("alice"), pending)}),
    ]


def test_a_post_without_this_principals_token_for_this_item_is_403(world: World) -> None:
    pending = world.pending(world.small)
    before = dump(world.h)
    for case, form in _token_cases(world):
        reply = post("alice", pending, form)
        assert reply.status == 403, case
        assert re.search(r'data-state="bad-token"', reply.body), case
    assert dump(world.h) == before and world.calls.log == []


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example"},
        {"origin": "http://127.0.0.1:9999"},
        {"origin": "https://127.0.0.1:8787"},
        {"origin": "null"},
        {"origin": ORIGIN, "sec_fetch_site": "cross-site"},
        {"origin": ORIGIN, "sec_fetch_site": "same-site"},
    ],
)
def test_a_cross_site_post_is_refused_even_with_a_valid_token(world: World, headers: dict[str, str]) -> None:
    pending = world.pending(world.small)
    form = inbox("alice").forms()[pending].submit()
    before = dump(world.h)

    reply = post("alice", pending, form, **headers)

    assert reply.status == 403 and 'data-state="cross-site"' in reply.body
    assert dump(world.h) == before and world.calls.log == []


def test_a_same_origin_post_passes_the_origin_check(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPENGINE_PUBLIC_URL", "https://approvals.example.com/")
    pending = world.pending(world.small)
    form = inbox("alice").forms()[pending].submit()
    reply = post(
        "alice", pending, form, origin="https://Approvals.example.com:443", sec_fetch_site="same-origin"
    )
    assert reply.status == 303, reply.body


def test_another_tenants_item_is_404_whatever_the_token(world: World) -> None:
    pending = world.pending(world.other)
    bobs = inbox("bob").forms()[pending].submit()
    before = dump(world.h)
    for form in (bobs, {}):
        reply = post("alice", pending, form)
        assert reply.status == 404 and 'data-state="not-found"' in reply.body
    assert inbox("alice", f"?item={pending}").body.count(pending) == 0  # no flash about it either
    assert post("alice", "pnd_nope", bobs).status == 404
    assert dump(world.h) == before and world.calls.log == []


def test_not_an_approver_is_403_and_nothing_is_decided(world: World) -> None:
    pending = world.pending(world.big)
    form = inbox("mgr").forms()[pending].submit()
    forged = {**form, "csrf": csrf.issue(csrf.key_from({csrf.SECRET_ENV: SECRET}) or b"", _alice(), pending)}
    before = dump(world.h)

    reply = post("alice", pending, forged)

    assert reply.status == 403 and "refund-managers" in reply.body
    assert dump(world.h) == before and world.calls.log == []


def _alice() -> Principal:
    return Principal("user:alice", "inbox", (), frozenset({"acme"}), kind="user")


def test_a_late_click_shows_what_became_of_the_item_and_who_decided(world: World) -> None:
    pending = world.pending(world.big)
    form = inbox("mgr").forms()[pending].submit(("decision", "approve"))
    body = json.dumps({"decision": "deny", "comment": "no"}).encode()
    denied = send(
        "POST", f"/pending-approvals/{pending}/resolve", "mgr", body, content_type="application/json"
    )
    assert denied.status == 200, denied.body

    reply = post("mgr", pending, form)  # the page was loaded before the denial

    assert reply.status == 303 and reply.headers["location"] == f"/inbox?item={pending}"
    flash = inbox("mgr", f"?item={pending}").body
    assert re.search(
        r'data-state="already-resolved"[^>]*>Already resolved: denied by user:mgr via api on ', flash
    )
    assert world.calls.log == []


def test_a_late_click_after_a_supersede_and_after_a_siblings_denial(world: World) -> None:
    twice = message("mgr", "refund 5 twice")
    first, second = world.pending(twice, 0), world.pending(twice, 1)
    forms = inbox("mgr").forms()
    assert post("mgr", first, forms[first].submit(("decision", "deny"))).status == 303
    assert post("mgr", second, forms[second].submit()).status == 303
    skipped = inbox("mgr", f"?item={second}").body
    assert "another call of the same request was denied" in skipped
    # a new message on the session supersedes the wait on the small refund
    session = world.small["sessionId"]
    body = json.dumps({"message": "refund 9", "sessionId": session}).encode()
    assert send("POST", "/agents/shop/messages", "alice", body, content_type="application/json").status == 202
    small = world.pending(world.small)
    stale = forms[small].submit()
    assert post("mgr", small, stale).status == 303
    assert 'data-state="superseded"' in inbox("mgr", f"?item={small}").body
    assert world.calls.log == []


def test_hostile_arguments_are_escaped_everywhere(world: World) -> None:
    hostile = message("alice", "refund 12 hostile")
    asked = message("alice", "ask")
    page = inbox("alice")
    assert page.status == 200
    assert "<script>alert" not in page.body and "<img src=x" not in page.body
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page.body
    forms = page.forms()
    assert forms[world.pending(hostile)].values["arg.reason"] == HOSTILE  # the browser reads it back intact
    assert ("choice", HOSTILE) in forms[world.pending(asked)].buttons
    # and through a refused post's page, which echoes what was typed
    reply = post(
        "alice", world.pending(hostile), forms[world.pending(hostile)].submit(**{"arg.amount": HOSTILE})
    )
    assert reply.status == 400 and "<script>alert" not in reply.body and "<img src=x" not in reply.body


def test_without_a_key_the_inbox_lists_but_cannot_decide(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    pending = world.pending(world.small)
    form = inbox("alice").forms()[pending].submit()
    monkeypatch.delenv(csrf.SECRET_ENV)
    page = inbox("alice")
    assert page.status == 200 and pending in page.shown() and page.forms() == {}
    assert "LOOPENGINE_INBOX_SECRET" in page.body
    before = dump(world.h)
    reply = post("alice", pending, form)
    assert reply.status == 503 and dump(world.h) == before
    monkeypatch.setenv("LOOPENGINE_MAGIC_LINK_SECRET", "magic-0123456789")  # the fallback key
    assert post("alice", pending, form).status == 403  # another key: the old page's token is void
    assert post("alice", pending, inbox("alice").forms()[pending].submit()).status == 303


def test_bad_forms_and_filters_are_pages_not_errors(world: World) -> None:
    pending = world.pending(world.small)
    form = inbox("alice").forms()[pending].submit()
    before = dump(world.h)
    too_many = "&".join(f"f{i}=1" for i in range(300))
    bad = send(
        "POST",
        f"/inbox/items/{pending}",
        "alice",
        too_many.encode(),
        origin=ORIGIN,
        content_type="application/x-www-form-urlencoded",
    )
    assert bad.status == 400 and bad.headers["content-type"].startswith("text/html")
    assert post("alice", pending, {**form, "decision": "maybe"}).status == 400
    assert post("alice", pending, {**form, "comment": "x" * 4001}).status == 400
    assert dump(world.h) == before
    assert inbox("alice", "?tenant=%20bad").status == 400
    assert inbox("alice", "?item=nope").status == 400
    kept = post("alice", pending, {**form, "tenant": "acme", "agent": "shop"})
    assert kept.headers["location"] == f"/inbox?tenant=acme&agent=shop&item={pending}"


def test_the_page_names_the_turns_its_script_follows_with_their_cursors(world: World) -> None:
    page = inbox("alice")
    follow = re.search(r'data-follow="([^"]*)"', page.body)
    assert follow
    cursors = dict(entry.split(":") for entry in follow.group(1).split())
    for paused in (world.small, world.big):
        turn = paused["turnId"]
        assert int(cursors[turn]) == len(world.h.rt.stores.turns.events(turn))  # seq: 1-based place
    listed = re.search(r'data-items="([^"]*)"', page.body)
    assert listed and set(listed.group(1).split()) == {world.pending(world.small), world.pending(world.big)}


# --- the sample events, the documented figures, the wheel ----------------------------------------


def test_the_sample_events_run_with_the_env_files_key(
    install_root: InstallRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # events/inbox_decide.json carries the admin's form token for its placeholder item under the
    # key events/env.json gives sam local (the magic-link secret): a click on an item that is gone
    env = json.loads((EVENTS / "env.json").read_text())["Parameters"]
    monkeypatch.delenv(csrf.SECRET_ENV, raising=False)
    install_root(
        lambda _e: RecordingInvoker(), LOOPENGINE_MAGIC_LINK_SECRET=env["LOOPENGINE_MAGIC_LINK_SECRET"]
    )
    for name, status in (("inbox", 200), ("inbox_decide", 303), ("inbox_static", 200)):
        result = api.handler(load_event(name), lambda_context(FakeContext()))
        assert result["statusCode"] == status, (name, result["body"][:500])
    decide = api.handler(load_event("inbox_decide"), lambda_context(FakeContext()))
    assert decide["headers"]["Location"] == f"/inbox?item={PLACEHOLDER_PENDING}"


def test_the_documented_figures_are_the_codes() -> None:
    from loopengine.channels.inbox import routes as routes_inbox

    http_api = " ".join((ROOT / "docs" / "http-api.md").read_text().split())
    script = (ROOT / "src" / "loopengine" / "channels" / "inbox" / "static" / "inbox.js").read_text()
    assert f"(at most {routes_inbox.MAX_FOLLOWED} at once, of turns still going)" in http_api
    assert f"A page shows at most {routes_inbox.MAX_ITEMS} items" in http_api
    assert "long-polled (`wait=20`)" in http_api and "var WAIT = 20;" in script
    assert "every 30 s compares" in http_api and "var LIST_EVERY_MS = 30000;" in script


@pytest.mark.slow
def test_the_wheel_carries_the_templates_and_static_files(tmp_path_factory: pytest.TempPathFactory) -> None:
    import zipfile

    from tests.wheel_support import built_wheel

    wheel = built_wheel(tmp_path_factory)  # from a clean copy: an in-tree build/ would hold an older build
    names = set(zipfile.ZipFile(wheel).namelist())
    for channel in ("inbox", "chat"):  # the conversation page's templates, script and client module too
        package = ROOT / "src" / "loopengine" / "channels" / channel
        files = [p for p in (*package.glob("templates/*"), *package.glob("static/*")) if p.is_file()]
        assert files
        assert {"loopengine/" + p.relative_to(ROOT / "src" / "loopengine").as_posix() for p in files} <= names
