"""Lark's card callback: signature, encryption, token, challenge, and clicks through the api handler.

The fixtures follow Lark's documented callback shapes (``card.action.trigger``, schema 2.0; the URL
verification; ``{"encrypt": ...}`` bodies). Encrypted bodies are made here with ``cryptography``
(AES-256-CBC, key SHA-256 of the Encrypt Key, IV first, PKCS#7), and signatures computed here from
Lark's formula, independently of the code under test. Route tests start from
events/lark_interaction.json and run through the real Powertools app and an Engine on SQLite.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopengine.app.engine import Engine
from loopengine.app.invokers import RecordingInvoker
from loopengine.app.request.resolution import Decider
from loopengine.authoring.agent import AgentConfig
from loopengine.authoring.tools import ASK_USER
from loopengine.channels.base import NOT_AN_APPROVER
from loopengine.channels.lark import routes as lark_route
from loopengine.channels.lark.receive import (
    LarkAction,
    LarkChallenge,
    LarkNotConfigured,
    LarkRejectReason,
    LarkVerificationError,
    open_callback,
    sign_lark,
    verify_signature,
)
from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.turns import StopReason, TurnStatus
from loopengine.http import api, root
from loopengine.models.scripted import ScriptedModel, call, say, use
from tests import lark_support as support
from tests.handler_support import PLACEHOLDER_PENDING, InstallRoot, load_event
from tests.handler_support import call as http
from tests.harness import Build, Calls, Harness, agent
from tests.lark_support import (
    ALICE,
    APP_ID,
    BOB,
    HEADERS,
    KEY,
    NONCE,
    T0,
    TOKEN,
    action,
    challenge,
    encrypt,
    signed_headers,
    wire,
)

Reply = tuple[int, dict[str, Any]]


def opened(doc: Any, *, configured_key: str | None = KEY, now: float = T0, **kw: Any) -> Any:
    body, headers = wire(doc, **kw)
    return open_callback(body, headers, token=TOKEN, encrypt_key=configured_key, now=now)


def refused(doc: Any, **kw: Any) -> LarkRejectReason:
    with pytest.raises(LarkVerificationError) as info:
        opened(doc, **kw)
    return info.value.reason


# -- the signature ---------------------------------------------------------------------------------


def test_the_signature_is_sha256_of_timestamp_nonce_key_and_body() -> None:
    body = b'{"encrypt":"x"}'
    expected = hashlib.sha256(b"1735689600" + b"13f5a5e7" + KEY.encode() + body).hexdigest()
    assert sign_lark(KEY, body, "1735689600", NONCE) == expected


def test_a_signed_encrypted_click_opens() -> None:
    got = opened(action({"decision": "approve", "pendingId": "pnd_1"}))
    assert got == LarkAction(
        "approve",
        "pnd_1",
        ALICE,
        APP_ID,
        event_id="f7984f25108f8137722bb63cee927e66",
        message_id="om_00000000000000000000000000000000",
    )
    assert got.decider == f"lark:{ALICE}"


def test_a_bad_signature_is_refused() -> None:
    doc = action({"decision": "approve", "pendingId": "pnd_1"})
    assert refused(doc, sign_key="someone-elses-key") is LarkRejectReason.BAD_SIGNATURE
    body, headers = wire(doc)
    for tampered in (body + b" ", body.replace(b'"encrypt"', b'"encrypt" ')):
        with pytest.raises(LarkVerificationError) as info:
            open_callback(tampered, headers, token=TOKEN, encrypt_key=KEY, now=T0)
        assert info.value.reason is LarkRejectReason.BAD_SIGNATURE
    other_nonce = {**headers, "X-Lark-Request-Nonce": "99999999"}
    with pytest.raises(LarkVerificationError, match="does not match"):
        open_callback(body, other_nonce, token=TOKEN, encrypt_key=KEY, now=T0)


@pytest.mark.parametrize("offset", [301, -301, 86_400])
def test_a_stale_signature_is_refused_either_way(offset: int) -> None:
    doc = action({"decision": "approve", "pendingId": "pnd_1"})
    assert refused(doc, sent=T0 - offset) is LarkRejectReason.STALE_TIMESTAMP
    opened(doc, sent=T0 - 300)  # the edge of the window still passes
    opened(doc, sent=T0 + 300)


@pytest.mark.parametrize(
    "headers,reason",
    [
        ({"X-Lark-Signature": None}, LarkRejectReason.MISSING_HEADER),
        ({"X-Lark-Request-Nonce": ""}, LarkRejectReason.MISSING_HEADER),
        ({"X-Lark-Request-Timestamp": "soon"}, LarkRejectReason.MALFORMED_HEADER),
        ({"X-Lark-Request-Timestamp": "\u0661\u0667\u0663"}, LarkRejectReason.MALFORMED_HEADER),
        ({"X-Lark-Signature": "0" * 63}, LarkRejectReason.MALFORMED_HEADER),
        ({"X-Lark-Signature": "sha256=" + "0" * 64}, LarkRejectReason.MALFORMED_HEADER),
        ({"X-Lark-Request-Nonce": "a b"}, LarkRejectReason.MALFORMED_HEADER),
    ],
)
def test_missing_or_malformed_headers_are_refused(headers: dict[str, Any], reason: LarkRejectReason) -> None:
    body, good = wire(action({"decision": "deny", "pendingId": "pnd_1"}))
    with pytest.raises(LarkVerificationError) as info:
        open_callback(body, {**good, **headers}, token=TOKEN, encrypt_key=KEY, now=T0)
    assert info.value.reason is reason


def test_with_a_key_configured_a_card_action_must_be_signed() -> None:
    doc = action({"decision": "approve", "pendingId": "pnd_1"})
    assert refused(doc, signed=False) is LarkRejectReason.UNSIGNED  # encrypted, but unsigned
    assert refused(doc, encrypted=False, signed=False) is LarkRejectReason.UNSIGNED
    # signed plaintext is authentic: the signature covers the body
    assert isinstance(opened(doc, encrypted=False), LarkAction)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=512), st.integers(min_value=0))
def test_property_any_changed_byte_fails_the_signature(extra: bytes, flip: int) -> None:
    body, headers = wire(action({"decision": "approve", "pendingId": "pnd_1"}))
    verify_signature(KEY, body, headers["X-Lark-Request-Timestamp"], NONCE, headers["X-Lark-Signature"], T0)
    changed = bytearray(body + extra)
    changed[flip % len(changed)] ^= 0x01
    with pytest.raises(LarkVerificationError) as info:
        verify_signature(KEY, bytes(changed), str(T0), NONCE, headers["X-Lark-Signature"], T0)
    assert info.value.reason is LarkRejectReason.BAD_SIGNATURE


# -- encryption and the token ----------------------------------------------------------------------


def test_an_encrypted_url_verification_is_answered() -> None:
    assert opened(challenge(), signed=False) == LarkChallenge("ch_9f3c1e0a")


def test_every_unreadable_encrypted_body_is_the_same_refusal() -> None:
    doc = action({"decision": "approve", "pendingId": "pnd_1"})
    raw = base64.b64decode(encrypt(KEY, doc, iv=b"\0" * 16))
    cut = base64.b64encode(raw[:-16]).decode()  # padding gone: a padding error inside
    flipped = base64.b64encode(raw[:-1] + bytes([raw[-1] ^ 1])).decode()
    messages = set()
    for outer in (
        {"encrypt": encrypt("wrong-key", doc)},
        {"encrypt": cut},
        {"encrypt": flipped},
        {"encrypt": "***"},
        {"encrypt": 7},
        {"encrypt": encrypt(KEY, [1, 2])},
        {"encrypt": base64.b64encode(b"short").decode()},
    ):
        body = json.dumps(outer).encode()
        headers = signed_headers(body, KEY)
        with pytest.raises(LarkVerificationError) as info:
            open_callback(body, headers, token=TOKEN, encrypt_key=KEY, now=T0)
        assert info.value.reason is LarkRejectReason.UNREADABLE
        messages.add(str(info.value))
    assert len(messages) == 1  # no padding oracle: one answer for every failure


def test_an_encrypted_body_without_a_configured_key_is_not_configured() -> None:
    body = json.dumps({"encrypt": encrypt(KEY, challenge())}).encode()
    with pytest.raises(LarkNotConfigured):
        open_callback(body, dict.fromkeys(HEADERS), token=TOKEN, encrypt_key=None, now=T0)


@pytest.mark.parametrize("key", [KEY, None])
def test_a_token_mismatch_is_refused(key: str | None) -> None:
    for doc in (action({"decision": "approve", "pendingId": "pnd_1"}, token="other"), challenge("other")):
        assert refused(doc, key=key, configured_key=key, signed=key is not None) is LarkRejectReason.BAD_TOKEN
    headless = action({"decision": "approve", "pendingId": "pnd_1"})
    del headless["header"]["token"]
    assert refused(headless, key=key, configured_key=key) is LarkRejectReason.BAD_TOKEN


def test_without_a_key_the_token_alone_vouches() -> None:
    doc = action({"decision": "deny", "pendingId": "pnd_1"})
    assert opened(doc, key=None, configured_key=None).decision == "deny"
    assert opened(challenge(), key=None, configured_key=None) == LarkChallenge("ch_9f3c1e0a")


def test_with_a_key_a_plaintext_unsigned_challenge_is_refused() -> None:
    assert refused(challenge(), encrypted=False, signed=False) is LarkRejectReason.UNSIGNED


# -- reading the click -------------------------------------------------------------------------------


def test_a_group_looking_open_id_stays_a_lark_identity() -> None:
    got = opened(action({"decision": "approve", "pendingId": "pnd_1"}, "group:finance"))
    assert got.decider == "lark:group:finance"
    assert Decider(got.decider, "lark", kind="lark").id == "lark:group:finance"
    assert not Decider(got.decider, "lark", kind="lark").may_approve(["group:finance"])


def value_of(**change: Any) -> dict[str, Any]:
    return {"decision": "approve", "pendingId": "pnd_1", **change}


def bad(doc: dict[str, Any], where: str, *path: str) -> dict[str, Any]:
    node = doc
    for key in path[:-1]:
        node = node[key]
    if where == "del":
        del node[path[-1]]
    else:
        node[path[-1]] = json.loads(where)
    return doc


@pytest.mark.parametrize(
    "doc,message",
    [
        (action(value_of(decision="maybe")), "decision"),
        (action(value_of(pendingId="pnd 1")), "pendingId"),
        (action(value_of(pendingId="pnd_1/../x")), "pendingId"),
        (action(value_of(answer="sneaky")), "no answer"),
        (action(value_of(decision="answer")), "answer"),
        (action(value_of(decision="answer", answer="  ")), "answer"),
        (action("approve:pnd_1"), "JSON object"),
        (action(value_of(), "ou with space"), "open_id"),
        (action(value_of(), "<at id=all>"), "open_id"),
        (action(value_of(), ""), "open_id"),
        (bad(action(value_of()), "del", "event", "operator"), "open_id"),
        (bad(action(value_of()), "del", "event", "action"), "action"),
        (bad(action(value_of()), '"im.message.receive_v1"', "header", "event_type"), "unsupported"),
        (bad(action(value_of()), "del", "schema"), "schema 2.0"),
        (bad(action(value_of()), "[]", "event"), "event"),
    ],
)
def test_malformed_clicks_say_what_is_wrong(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        opened(doc)
    assert message in str(info.value)


def test_the_older_message_card_callback_is_refused() -> None:
    old = {
        "open_id": ALICE,
        "open_message_id": "om_1",
        "tenant_key": "t",
        "token": TOKEN,
        "action": {"value": value_of(), "tag": "button"},
    }
    with pytest.raises(InvalidInput, match=r"card\.action\.trigger"):
        opened(old, key=None, configured_key=None)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=12,
    )
)
def test_property_anything_authentic_but_odd_is_invalid_input(value: Any) -> None:
    # a signed, encrypted body with any value anywhere: InvalidInput or a click, never another error
    doc = action(value)
    with contextlib.suppress(InvalidInput):
        opened(doc)
    mangled = copy.deepcopy(doc)
    mangled["event"] = value
    with contextlib.suppress(InvalidInput):
        opened(mangled)


# -- the route: customer-service through the api handler -------------------------------------------


@pytest.fixture(autouse=True)
def lark_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lark_route.APP_ID_ENV, APP_ID)
    monkeypatch.setenv(lark_route.TOKEN_ENV, TOKEN)
    monkeypatch.setenv(lark_route.ENCRYPT_KEY_ENV, KEY)


@pytest.fixture
def engine(install_root: InstallRoot) -> Engine:
    return install_root(lambda _engine: RecordingInvoker())


def lark_event(doc: Any, **kw: Any) -> dict[str, Any]:
    """events/lark_interaction.json carrying ``doc`` as Lark would send it now (encrypted, signed)."""
    return support.lark_event(doc, root.engine().now(), **kw)


def click(decision: str, pending: str, who: str = ALICE, answer: str | None = None, **kw: Any) -> Reply:
    value = {"decision": decision, "pendingId": pending}
    if answer is not None:
        value["answer"] = answer
    return http(api.handler, lark_event(action(value, who), **kw))


def pause_refund() -> tuple[str, str]:
    status, body = http(api.handler, load_event("post_message"))
    assert status == 202 and body["pendingItems"][0]["tool"] == "issue_refund", body
    return body["turnId"], body["pendingItems"][0]["pendingId"]


def decided(engine: Engine, turn_id: str) -> list[dict[str, Any]]:
    return [e for e in engine.rt.stores.turns.events(turn_id) if e["type"] == "decided"]


def card_text(reply: dict[str, Any]) -> str:
    card = reply["card"]
    assert card["type"] == "raw" and card["data"]["config"]["update_multi"] is True
    return json.dumps(card["data"], ensure_ascii=False)


def test_approve_decides_as_the_lark_user_and_updates_the_card(engine: Engine) -> None:
    # GIVEN a turn parked on the refund
    turn_id, pending = pause_refund()
    # WHEN Alice clicks Approve on the Lark card
    status, reply = click("approve", pending)
    # THEN Lark is told who approved, and the card says so (for everyone)
    assert status == 200 and reply["toast"] == {"type": "success", "content": f"Approved by lark:{ALICE}"}
    assert reply["card"]["data"]["header"]["title"]["content"] == "Approved: issue_refund"
    assert f"Approved by lark:{ALICE}" in card_text(reply)
    # AND the decision records the typed Lark identity and channel, and the resume was handed on
    [event] = decided(engine, turn_id)
    assert (event["decidedBy"], event["channel"], event["decision"]) == (f"lark:{ALICE}", "lark", "approve")
    assert isinstance(engine.rt.invoker, RecordingInvoker) and engine.rt.invoker.invoked == [turn_id]
    engine.resume(engine.rt.invoker.invoked.pop())
    assert engine.outcome(turn_id).pending[0].tool == "send_email"  # the refund ran; the email asks


def test_deny_finishes_the_turn_denied(engine: Engine) -> None:
    turn_id, pending = pause_refund()
    status, reply = click("deny", pending, BOB)
    assert status == 200 and reply["toast"]["content"] == f"Denied by lark:{BOB}"
    assert reply["card"]["data"]["header"]["template"] == "red"
    turn = engine.turn(turn_id)
    assert turn.status is TurnStatus.FINISHED and turn.stop_reason is StopReason.DENIED
    [event] = decided(engine, turn_id)
    assert (event["decidedBy"], event["decision"]) == (f"lark:{BOB}", "deny")


def test_a_late_click_says_what_became_of_the_item(engine: Engine) -> None:
    turn_id, pending = pause_refund()
    first = click("approve", pending)
    status, late = click("deny", pending, BOB)
    assert status == 200 and late["toast"] == {
        "type": "info",
        "content": f"Already resolved: approved by lark:{ALICE}",
    }
    assert late["card"] == first[1]["card"]  # the card keeps saying who decided
    assert len(decided(engine, turn_id)) == 1
    status, unknown = click("approve", "pnd_0123456789abcdef0123456789abcdef")
    assert status == 200 and unknown["toast"]["content"] == "Already resolved"


def test_a_duplicate_delivery_decides_once(engine: Engine) -> None:
    turn_id, pending = pause_refund()
    event = lark_event(action({"decision": "approve", "pendingId": pending}))
    first, again = http(api.handler, event), http(api.handler, copy.deepcopy(event))
    assert first[0] == again[0] == 200 and first[1]["card"] == again[1]["card"]
    assert again[1]["toast"]["type"] == "info"
    assert len(decided(engine, turn_id)) == 1
    assert engine.rt.invoker.invoked == [turn_id]  # type: ignore[attr-defined]


@pytest.mark.parametrize("app_id", [None, "", "cli_someone_else"])
def test_an_unset_or_other_app_id_is_403_and_decides_nothing(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, app_id: str | None
) -> None:
    turn_id, pending = pause_refund()
    if app_id is None:
        monkeypatch.delenv(lark_route.APP_ID_ENV)
    else:
        monkeypatch.setenv(lark_route.APP_ID_ENV, app_id)
    status, body = click("approve", pending)
    assert status == 403 and body["error"] == "forbidden"
    status, body = http(api.handler, lark_event(challenge(), signed=False))
    assert status == (403 if not app_id else 200)  # unset: even the URL verification fails closed
    assert decided(engine, turn_id) == [] and engine.turn(turn_id).status is TurnStatus.PAUSED


def test_a_click_for_another_app_or_none_is_403(engine: Engine) -> None:
    turn_id, pending = pause_refund()
    for doc in (
        action({"decision": "approve", "pendingId": pending}, app_id="cli_other"),
        action({"decision": "approve", "pendingId": pending}, app_id=None),
    ):
        status, body = http(api.handler, lark_event(doc))
        assert status == 403 and body["error"] == "forbidden"
    assert decided(engine, turn_id) == []


def test_bad_stale_or_unsigned_requests_are_401_and_decide_nothing(engine: Engine) -> None:
    turn_id, pending = pause_refund()
    doc = action({"decision": "approve", "pendingId": pending})
    for event in (
        lark_event(doc, sign_key="not-the-key"),
        lark_event(doc, skew=-330),  # past the 5-minute window, with a margin
        lark_event(doc, skew=330),
        lark_event(doc, signed=False),
        lark_event(action({"decision": "approve", "pendingId": pending}, token="not-the-token")),
        lark_event(doc, key="other-key"),
    ):
        status, body = http(api.handler, event)
        assert status == 401 and body["error"] == "unauthorized", body
    assert decided(engine, turn_id) == []
    assert http(api.handler, load_event("lark_interaction"))[0] == 401  # the unedited sample: zero signature


def test_the_url_verification_is_answered_only_when_verified(engine: Engine) -> None:
    status, body = http(api.handler, lark_event(challenge(), signed=False))
    assert (status, body) == (200, {"challenge": "ch_9f3c1e0a"})
    assert http(api.handler, lark_event(challenge("wrong"), signed=False))[0] == 401
    assert http(api.handler, lark_event(challenge(), encrypted=False, signed=False))[0] == 401


def test_without_an_encrypt_key_the_token_is_checked(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(lark_route.ENCRYPT_KEY_ENV)
    turn_id, pending = pause_refund()
    plain = {"key": None, "encrypted": False, "signed": False}
    assert http(api.handler, lark_event(challenge(), **plain)) == (200, {"challenge": "ch_9f3c1e0a"})
    wrong = action({"decision": "approve", "pendingId": pending}, token="guess")
    assert http(api.handler, lark_event(wrong, **plain))[0] == 401
    status, body = http(
        api.handler, lark_event(action({"decision": "approve", "pendingId": pending}), **plain)
    )
    assert status == 200 and body["toast"]["type"] == "success"
    # an encrypted body cannot be read here: not configured, nothing decided twice
    assert http(api.handler, lark_event(challenge(), signed=False))[0] == 503
    assert len(decided(engine, turn_id)) == 1


def test_no_verification_token_is_503(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(lark_route.TOKEN_ENV)
    _, pending = pause_refund()
    assert click("approve", pending) == (
        503,
        {"error": "not_configured", "message": "Lark is not configured"},
    )


def test_a_base64_body_is_verified_on_its_bytes(engine: Engine) -> None:
    turn_id, pending = pause_refund()
    assert click("approve", pending, b64=True)[0] == 200
    assert len(decided(engine, turn_id)) == 1


def test_the_secrets_are_never_logged(
    engine: Engine, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    _, pending = pause_refund()
    click("approve", pending, sign_key="wrong")
    click("approve", pending)
    out = capsys.readouterr()
    logged = out.out + out.err + "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "refused a Lark request" in logged
    assert KEY not in logged and TOKEN not in logged


# -- the route: approvers, questions (harness agents) -------------------------------------------------


def waiter(calls: Calls, rules: dict[str, Any] | None = None) -> AgentConfig:
    return agent("waiter", [calls.tool("gated")], rules or {"default_decision": "ask"})


def park(h: Harness) -> tuple[str, str]:
    out = h.engine.send_message("waiter", "please")
    assert out.status is TurnStatus.PAUSED
    return out.turn_id, out.pending[0].pending_id


def test_a_group_looking_open_id_never_acts_as_the_group(install_harness: Build) -> None:
    # GIVEN a call only group:finance (or one Lark user) may approve
    calls = Calls()
    rules = {
        "rules": [{"tool": "gated", "decision": "ask", "approvers": ["group:finance", f"lark:{ALICE}"]}],
        "default_decision": "ask",
    }
    model = ScriptedModel.from_list([call(use("gated", {"x": 1})), say("done")])
    h = install_harness(waiter(calls, rules), model=model)
    turn_id, pending = park(h)
    # WHEN a Lark user whose open_id reads "group:finance" clicks Approve
    status, reply = click("approve", pending, "group:finance")
    # THEN they are lark:group:finance, not the group: told privately, nothing decided
    assert (status, reply) == (200, {"toast": {"type": "error", "content": NOT_AN_APPROVER}})
    assert calls.count("gated") == 0 and decided(h.engine, turn_id) == []
    # AND the named Lark user may
    assert click("approve", pending, ALICE)[1]["toast"]["content"] == f"Approved by lark:{ALICE}"
    assert calls.count("gated") == 1


def test_an_option_button_answers_the_question_as_the_lark_user(install_harness: Build) -> None:
    question = {"question": "Refund or replace?", "options": ["refund", "replace"]}
    model = ScriptedModel.from_list([call(use(ASK_USER, question)), say("ok")])
    h = install_harness(waiter(Calls()), model=model)
    turn_id, pending = park(h)
    status, reply = click("answer", pending, BOB, answer="replace")
    assert status == 200 and reply["toast"]["content"] == f"Answered by lark:{BOB}"
    assert "Answer:\\nreplace" in card_text(reply)
    [event] = decided(h.engine, turn_id)
    assert (event["decidedBy"], event["channel"], event["decision"]) == (f"lark:{BOB}", "lark", "answer")
    cp = h.rt.stores.checkpoints.find_by_pending(pending)
    assert cp is not None and [d.to_dict()["answer"] for d in cp.decisions] == ["replace"]
    assert h.engine.turn(turn_id).stop_reason is StopReason.END_TURN


def test_a_button_of_the_wrong_kind_decides_nothing(install_harness: Build) -> None:
    model = ScriptedModel.from_list([call(use(ASK_USER, {"question": "which?"})), say("ok")])
    h = install_harness(waiter(Calls()), model=model)
    turn_id, pending = park(h)
    status, reply = click("approve", pending)
    assert status == 200 and set(reply) == {"toast"} and reply["toast"]["type"] == "warning"
    assert h.engine.turn(turn_id).status is TurnStatus.PAUSED


def test_a_click_after_cancel_says_cancelled(install_harness: Build) -> None:
    calls = Calls()
    h = install_harness(
        waiter(calls), model=ScriptedModel.from_list([call(use("gated", {"x": 1})), say("x")])
    )
    turn_id, pending = park(h)
    h.engine.cancel(turn_id, Decider("admin"))
    status, reply = click("approve", pending)
    assert status == 200 and reply["toast"] == {"type": "info", "content": "Already resolved: cancelled"}
    assert reply["card"]["data"]["header"]["title"]["content"] == "Cancelled" and calls.count("gated") == 0


@pytest.mark.parametrize(
    "doc", [action({"decision": "maybe", "pendingId": "pnd_1"}), action({"decision": "approve"}, "ou x")]
)
def test_a_signed_but_malformed_click_is_400(engine: Engine, doc: dict[str, Any]) -> None:
    status, body = http(api.handler, lark_event(doc))
    assert status == 400 and body["error"] == "invalid_input" and "Traceback" not in body["message"]


def test_the_sample_event_is_a_click_on_the_button_we_send() -> None:
    from loopengine.channels.lark.cards import button_value

    event = load_event("lark_interaction")
    assert event["headers"]["content-length"] == str(len(event["body"].encode()))
    doc = json.loads(event["body"])
    assert doc["event"]["action"]["value"] == button_value("approve", PLACEHOLDER_PENDING)
    got = open_callback(event["body"].encode(), {}, token=TOKEN, encrypt_key=None, now=T0)
    assert isinstance(got, LarkAction) and (got.decision, got.pending_id) == ("approve", PLACEHOLDER_PENDING)
