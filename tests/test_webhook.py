"""The signed webhook channel: signing, verification, the sender and the local receiver."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from urllib.error import HTTPError

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopengine.app.ports import Notification
from loopengine.channels.signing import (
    RejectReason,
    WebhookVerificationError,
    sign,
    signature_header,
    verify_webhook,
)
from loopengine.channels.webhook.send import USER_AGENT, WebhookNotifier, from_env
from loopengine.channels.webhook.verify import WebhookReceiver
from loopengine.domain.base.clock import FakeClock
from loopengine.domain.base.errors import ConfigError, DeliveryError

SECRET = "whsec-s3cr3t-do-not-leak"
T0 = 1_800_000_000
BODY = b'{"event":"approval","pendingId":"p-1","tool":"issue_refund"}'

EVENTS = {
    "approval": "X-Actauth-Signature",
    "question": "X-Askuser-Signature",
    "run_start": "X-Loopengine-Signature",
    "run_finish": "X-Loopengine-Signature",
}


def rejected(body: bytes, header: str | None, *, secret: str = SECRET, now: float = T0) -> str:
    """Verify expecting failure; return the reason."""
    with pytest.raises(WebhookVerificationError) as info:
        verify_webhook(secret, body, header, now=now)
    return info.value.reason


def free_port() -> int:
    """A loopback port with nothing listening on it (just released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- signing ------------------------------------------------------------------------------


def test_sign_has_the_documented_shape() -> None:
    mac = hmac.new(SECRET.encode(), f"{T0}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, BODY, T0) == f"t={T0},v1={mac}"


@pytest.mark.parametrize(("event", "header"), EVENTS.items())
def test_signature_header_per_event(event: str, header: str) -> None:
    assert signature_header(event) == header


def test_signature_header_rejects_unknown_event() -> None:
    with pytest.raises(ValueError, match="unknown webhook event 'nope'"):
        signature_header("nope")


def test_round_trip_verifies() -> None:
    verify_webhook(SECRET, BODY, sign(SECRET, BODY, T0), now=T0)


def test_tampered_body_is_rejected() -> None:
    header = sign(SECRET, BODY, T0)
    assert rejected(BODY.replace(b"p-1", b"p-2"), header) == RejectReason.BAD_SIGNATURE


def test_wrong_secret_is_rejected() -> None:
    header = sign("another-secret", BODY, T0)
    assert rejected(BODY, header) == RejectReason.BAD_SIGNATURE


@pytest.mark.parametrize("offset", [-301, 301, -300.5])
def test_timestamp_more_than_300s_off_is_rejected(offset: float) -> None:
    # GIVEN an authentic signature made `offset` seconds away from the receiver's clock
    header = sign(SECRET, BODY, T0)
    # THEN it is refused as stale, in the past and in the future alike
    assert rejected(BODY, header, now=T0 - offset) == RejectReason.STALE_TIMESTAMP


@pytest.mark.parametrize("offset", [-300, -299, 0, 299, 300])
def test_timestamp_within_300s_is_accepted(offset: int) -> None:
    verify_webhook(SECRET, BODY, sign(SECRET, BODY, T0), now=T0 - offset)


def test_tolerance_is_configurable() -> None:
    header = sign(SECRET, BODY, T0)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, BODY, header, now=T0 + 11, tolerance=10)
    verify_webhook(SECRET, BODY, header, now=T0 + 10, tolerance=10)


def test_now_defaults_to_the_system_clock() -> None:
    verify_webhook(SECRET, BODY, sign(SECRET, BODY, int(time.time())))
    assert rejected(BODY, sign(SECRET, BODY, T0), now=time.time()) == RejectReason.STALE_TIMESTAMP


def test_forged_stale_request_reports_bad_signature_not_staleness() -> None:
    assert rejected(BODY, sign("forger", BODY, T0 - 10_000)) == RejectReason.BAD_SIGNATURE


@pytest.mark.parametrize("header", [None, ""])
def test_missing_header_is_rejected(header: str | None) -> None:
    assert rejected(BODY, header) == RejectReason.MISSING_HEADER


@pytest.mark.parametrize(
    "header",
    [
        "t=abc,v1=" + "0" * 64,
        "t=,v1=" + "0" * 64,
        "t=-5,v1=" + "0" * 64,
        f"t={T0}",  # no v1
        f"t={T0},v0=" + "0" * 64,  # only an unknown scheme
        "v1=" + "0" * 64,  # no t
        f"t={T0},t={T0},v1=" + "0" * 64,  # two timestamps
        f"t={T0},v1=xyz",  # not hex
        f"t={T0},v1=" + "0" * 63,  # too short
        f"t={T0};v1=" + "0" * 64,  # wrong separator
        "garbage",
        f"t={T0},v1=" + "0" * 64 + ",x" * 3000,  # absurdly long
    ],
)
def test_malformed_header_is_rejected(header: str) -> None:
    assert rejected(BODY, header) == RejectReason.MALFORMED_HEADER


def test_key_rotation_accepts_any_matching_v1_entry() -> None:
    # GIVEN a sender signing with both the old and the new secret during a rotation
    old = sign("old-secret", BODY, T0).split(",")[1]
    new = sign("new-secret", BODY, T0).split(",")[1]
    header = f"t={T0},{old},{new}"
    # THEN a receiver holding either secret accepts it, one holding neither does not
    verify_webhook("old-secret", BODY, header, now=T0)
    verify_webhook("new-secret", BODY, header, now=T0)
    assert rejected(BODY, header, secret="third") == RejectReason.BAD_SIGNATURE


def test_unknown_schemes_and_spaces_are_tolerated() -> None:
    mac = sign(SECRET, BODY, T0).split("v1=")[1]
    verify_webhook(SECRET, BODY, f"t={T0}, v0=abc, v1={mac.upper()}", now=T0)


def test_negative_tolerance_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="tolerance"):
        verify_webhook(SECRET, BODY, sign(SECRET, BODY, T0), now=T0, tolerance=-1)


@settings(max_examples=50, deadline=None)
@given(
    body=st.binary(min_size=1, max_size=512),
    secret=st.text(min_size=1, max_size=64),
    timestamp=st.integers(min_value=0, max_value=4_000_000_000),
    data=st.data(),
)
def test_property_sign_verify_and_any_flipped_byte_fails(
    body: bytes, secret: str, timestamp: int, data: st.DataObject
) -> None:
    header = sign(secret, body, timestamp)
    verify_webhook(secret, body, header, now=timestamp)

    index = data.draw(st.integers(min_value=0, max_value=len(body) - 1), label="index")
    mask = data.draw(st.integers(min_value=1, max_value=255), label="mask")
    flipped = bytearray(body)
    flipped[index] ^= mask
    with pytest.raises(WebhookVerificationError) as info:
        verify_webhook(secret, bytes(flipped), header, now=timestamp)
    assert info.value.reason == RejectReason.BAD_SIGNATURE


# -- the sender over a fake transport ------------------------------------------------------


def notification(event: str = "approval") -> Notification:
    return Notification(event, {"pendingId": "p-1", "args": {"amount": 212.0}, "text": "héllo"})


def test_send_posts_compact_signed_json() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202)

    notifier = WebhookNotifier(
        "https://hooks.example.com/in?token=abc",
        SECRET,
        clock=FakeClock(T0),
        transport=httpx.MockTransport(handler),
    )
    where = notifier.send(notification())

    assert where == "webhook https://hooks.example.com/in (202)"
    (request,) = seen
    assert request.method == "POST"
    assert str(request.url) == "https://hooks.example.com/in?token=abc"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["User-Agent"] == USER_AGENT
    body = request.content
    assert body == (b'{"event":"approval","pendingId":"p-1","args":{"amount":212.0},"text":"h\\u00e9llo"}')
    assert request.headers["X-Actauth-Signature"] == sign(SECRET, body, T0)
    verify_webhook(SECRET, body, request.headers["X-Actauth-Signature"], now=T0)


def test_event_field_is_the_notifications_own() -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(200)

    notifier = WebhookNotifier(
        "https://h.example/x", SECRET, clock=FakeClock(T0), transport=httpx.MockTransport(handler)
    )
    notifier.send(Notification("question", {"event": "approval", "question": "Which?"}))
    assert json.loads(seen[0]) == {"event": "question", "question": "Which?"}


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (httpx.Response(500), "answered 500 Internal Server Error"),
        (httpx.Response(401), "answered 401 Unauthorized"),
        (httpx.Response(302, headers={"Location": "https://evil.example/"}), "answered 302"),
    ],
)
def test_non_2xx_raises_delivery_error(response: httpx.Response, expected: str) -> None:
    notifier = WebhookNotifier(
        f"https://user:{SECRET}@h.example/x?sig={SECRET}",
        SECRET,
        clock=FakeClock(T0),
        transport=httpx.MockTransport(lambda _request: response),
    )
    with pytest.raises(DeliveryError, match=expected) as info:
        notifier.send(notification())
    assert "webhook https://h.example/x " in str(info.value)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (httpx.ReadTimeout("timed out"), "timed out after 5 s"),
        (httpx.ConnectError(f"boom {SECRET}"), "failed: ConnectError"),
    ],
)
def test_transport_errors_raise_delivery_error(error: httpx.HTTPError, expected: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    notifier = WebhookNotifier(
        "https://h.example/x", SECRET, clock=FakeClock(T0), transport=httpx.MockTransport(handler)
    )
    with pytest.raises(DeliveryError, match=expected) as info:
        notifier.send(notification())
    assert SECRET not in str(info.value)
    assert info.value.__cause__ is error


def test_unknown_event_and_bad_payload_raise_delivery_error() -> None:
    notifier = WebhookNotifier(
        "https://h.example/x",
        SECRET,
        clock=FakeClock(T0),
        transport=httpx.MockTransport(lambda _request: httpx.Response(200)),
    )
    with pytest.raises(DeliveryError, match="unknown webhook event"):
        notifier.send(Notification("nope", {}))
    with pytest.raises(DeliveryError, match="not JSON-serialisable"):
        notifier.send(Notification("approval", {"x": object()}))
    with pytest.raises(DeliveryError, match="not JSON-serialisable"):
        notifier.send(Notification("approval", {"x": float("nan")}))


@pytest.mark.parametrize(
    ("url", "secret", "timeout"),
    [
        ("ftp://h.example/x", SECRET, 5.0),
        ("/relative", SECRET, 5.0),
        ("https://h.example:notaport/x", SECRET, 5.0),
        ("https://h.example/x", "", 5.0),
        ("https://h.example/x", SECRET, 0.0),
    ],
)
def test_constructor_rejects_bad_config(url: str, secret: str, timeout: float) -> None:
    with pytest.raises(ConfigError):
        WebhookNotifier(url, secret, clock=FakeClock(), timeout=timeout)


def test_repr_never_shows_the_secret() -> None:
    notifier = WebhookNotifier("https://h.example/x?k=1", SECRET, clock=FakeClock())
    assert SECRET not in repr(notifier)
    assert notifier.destination == "https://h.example/x"


def test_importing_the_module_does_not_import_httpx() -> None:
    code = (
        "import sys, loopengine.channels.webhook.send, loopengine.channels.webhook.verify\n"
        "assert 'httpx' not in sys.modules, 'httpx imported eagerly'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the sender against the real local receiver ---------------------------------------------


@pytest.mark.parametrize(("event", "header"), EVENTS.items())
def test_real_post_over_loopback_verifies(event: str, header: str) -> None:
    clock = FakeClock(T0)
    with WebhookReceiver(SECRET, clock=clock) as rx:
        notifier = WebhookNotifier(rx.url, SECRET, clock=clock)
        where = notifier.send(Notification(event, {"turnId": "t-1", "text": "done"}))

        hit = rx.wait_for(event, timeout=5)
        url = rx.url

    assert where == f"webhook {url} (204)"
    assert hit.verified
    assert hit.header == header
    assert hit.payload == {"event": event, "turnId": "t-1", "text": "done"}
    assert hit.reason is None


def test_receiver_with_a_different_secret_answers_401() -> None:
    clock = FakeClock(T0)
    with WebhookReceiver("receiver-has-another-secret", clock=clock) as rx:
        notifier = WebhookNotifier(rx.url, SECRET, clock=clock)
        with pytest.raises(DeliveryError, match="answered 401") as info:
            notifier.send(notification("question"))
        hit = rx.wait_for("question")

    assert SECRET not in str(info.value)
    assert not hit.verified
    assert hit.header == "X-Askuser-Signature"
    assert hit.reason == RejectReason.BAD_SIGNATURE


def test_receiver_rejects_a_stale_delivery() -> None:
    with WebhookReceiver(SECRET, clock=FakeClock(T0 + 301)) as rx:
        notifier = WebhookNotifier(rx.url, SECRET, clock=FakeClock(T0))
        with pytest.raises(DeliveryError, match="answered 401"):
            notifier.send(notification("run_start"))
        assert rx.received[0].reason == RejectReason.STALE_TIMESTAMP


def test_receiver_uses_the_system_clock_by_default() -> None:
    from loopengine.domain.base.clock import SystemClock

    with WebhookReceiver(SECRET) as rx:
        WebhookNotifier(rx.url, SECRET, clock=SystemClock()).send(notification("run_finish"))
        assert rx.wait_for("run_finish").verified


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            status: int = response.status
    except HTTPError as exc:
        status = exc.code
        exc.close()
    return status


def test_receiver_answers_400_for_unreadable_bodies_and_401_without_header() -> None:
    with WebhookReceiver(SECRET) as rx:
        assert post(rx.url, b"not json", {}) == 400
        assert post(rx.url, b"[1,2]", {}) == 400
        assert post(rx.url, b'{"event":"nope"}', {}) == 400
        assert post(rx.url, b'{"event":"approval"}', {}) == 401
        received = rx.received

    assert [(r.event, r.verified, r.header, r.reason) for r in received] == [
        ("", False, None, "body is not JSON"),
        ("", False, None, "body is not a JSON object"),
        ("nope", False, None, "unknown event"),
        ("approval", False, "X-Actauth-Signature", "missing_header"),
    ]


def test_receiver_checks_the_header_matching_the_event() -> None:
    # GIVEN an approval body signed correctly, but in the question header
    body = b'{"event":"approval"}'
    with WebhookReceiver(SECRET) as rx:
        status = post(rx.url, body, {"X-Askuser-Signature": sign(SECRET, body, int(time.time()))})
    assert status == 401


def test_wait_for_hands_out_each_arrival_once_and_times_out() -> None:
    clock = FakeClock(T0)
    with WebhookReceiver(SECRET, clock=clock) as rx:
        notifier = WebhookNotifier(rx.url, SECRET, clock=clock)
        notifier.send(Notification("run_finish", {"n": 0}))
        notifier.send(Notification("approval", {"n": 1}))
        notifier.send(Notification("approval", {"n": 2}))

        assert rx.wait_for("approval").payload["n"] == 1
        assert rx.wait_for("approval").payload["n"] == 2
        assert rx.wait_for("run_finish").payload["n"] == 0
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="no 'approval' webhook"):
            rx.wait_for("approval", timeout=0.2)
        assert time.monotonic() - started < 2
        assert [r.event for r in rx.received] == ["run_finish", "approval", "approval"]


def test_receiver_url_needs_a_running_server() -> None:
    rx = WebhookReceiver(SECRET)
    with pytest.raises(RuntimeError, match="not running"):
        _ = rx.url
    rx.close()  # closing a receiver that never started is harmless


def test_connection_refused_raises_delivery_error_quickly() -> None:
    notifier = WebhookNotifier(f"http://127.0.0.1:{free_port()}/hook", SECRET, clock=FakeClock())
    started = time.monotonic()
    with pytest.raises(DeliveryError, match="failed: ConnectError") as info:
        notifier.send(notification())
    assert time.monotonic() - started < 3
    assert SECRET not in str(info.value)


# -- from_env -------------------------------------------------------------------------------


def test_from_env_builds_the_default_webhook() -> None:
    notifier = from_env(
        {
            "LOOPENGINE_DEFAULT_WEBHOOK_URL": " https://h.example/hook ",
            "LOOPENGINE_DEFAULT_WEBHOOK_SECRET": SECRET,
        },
        FakeClock(),
    )
    assert isinstance(notifier, WebhookNotifier)
    assert notifier.destination == "https://h.example/hook"


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"LOOPENGINE_DEFAULT_WEBHOOK_URL": "  "},
        {"LOOPENGINE_DEFAULT_WEBHOOK_SECRET": SECRET},
    ],
)
def test_from_env_without_a_url_configures_nothing(environ: dict[str, str]) -> None:
    assert from_env(environ, FakeClock()) is None


@pytest.mark.parametrize("secret", [None, "", "   "])
def test_from_env_url_without_secret_is_a_config_error(secret: str | None) -> None:
    environ = {"LOOPENGINE_DEFAULT_WEBHOOK_URL": "https://h.example/hook"}
    if secret is not None:
        environ["LOOPENGINE_DEFAULT_WEBHOOK_SECRET"] = secret
    with pytest.raises(ConfigError, match="LOOPENGINE_DEFAULT_WEBHOOK_SECRET is not"):
        from_env(environ, FakeClock())


def test_a_process_builds_one_tls_context_for_all_its_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a client TLS context parses the whole CA bundle (tens of ms of CPU): once a process.

    Every channel's POST (webhook, Slack, Lark) goes through ``channels.http.post``.
    """
    built: list[int] = []
    real = ssl.create_default_context

    def counting(*args: object, **kwargs: object) -> ssl.SSLContext:
        built.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl, "create_default_context", counting)
    clock = FakeClock(T0)
    with WebhookReceiver(SECRET, clock=clock) as rx:
        notifier = WebhookNotifier(rx.url, SECRET, clock=clock)
        for n in range(3):
            notifier.send(Notification("approval", {"turnId": f"t-{n}"}))
        delivered = [rx.wait_for("approval", timeout=5) for _ in range(3)]

    assert [hit.payload["turnId"] for hit in delivered] == ["t-0", "t-1", "t-2"]

    assert len(built) <= 1, f"{len(built)} TLS contexts for 3 sends"
