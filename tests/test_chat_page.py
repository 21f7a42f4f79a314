"""``GET /chat/{agent}`` and its files through the api handler (in process): who may see what, what a
session's page shows, how it is escaped, and the headers. The page in a browser is
``tests/test_chat_browser.py``; the client module under node is ``tests/test_clients.py``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from loopengine.app.engine import Engine
from loopengine.app.invokers import RecordingInvoker
from loopengine.channels.chat import render
from loopengine.domain.decisions import Denial
from loopengine.domain.principals import Principal
from loopengine.http import api
from tests.handler_support import FakeContext, InstallRoot, lambda_context, load_event, with_auth

USERS = [{"user": "alice", "password": "pw", "tenants": ["acme"]}]
HOSTILE = 'Order A-1001 arrived broken <script>alert("x")</script> & "quoted"'
ADMIN = Principal("user:admin", "api", kind="operator")


@pytest.fixture
def engine(install_root: InstallRoot) -> Engine:
    return install_root(lambda _engine: RecordingInvoker(), LOOPENGINE_USERS=json.dumps(USERS))


def _get(path: str, user: str | None = "admin", password: str = "secret", **headers: str) -> dict[str, Any]:
    event = with_auth(load_event("chat"), user, password)
    path, _, query = path.partition("?")
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["rawQueryString"] = query
    event["queryStringParameters"] = dict(p.split("=", 1) for p in query.split("&")) if query else None
    event["pathParameters"] = {}
    event["headers"] = {**event["headers"], **headers}
    result: dict[str, Any] = api.handler(event, lambda_context(FakeContext()))
    result["headers"] = {k.lower(): v for k, v in (result.get("headers") or {}).items()}
    return result


def test_the_page_asks_a_browser_to_log_in_and_so_does_a_json_call_its_script_makes(engine: Engine) -> None:
    page = _get("/chat/customer-service", user=None)
    assert page["statusCode"] == 401 and page["headers"]["www-authenticate"].startswith("Basic ")
    bad = _get("/chat/customer-service", user="admin", password="wrong")
    assert bad["statusCode"] == 401 and "www-authenticate" in bad["headers"]
    # the JSON routes' 401s carry no challenge, unless the chat page's script made the request
    plain = _get("/pending-approvals", user=None)
    assert plain["statusCode"] == 401 and "www-authenticate" not in plain["headers"]
    scripted = _get("/pending-approvals", user=None, **{"x-loopengine-channel": "chat"})
    assert scripted["statusCode"] == 401 and scripted["headers"]["www-authenticate"].startswith("Basic ")


def test_a_session_shows_its_thread_escaped_and_its_open_card_where_it_was(engine: Engine) -> None:
    out = engine.send_message("customer-service", HOSTILE, sender=ADMIN)
    assert out.pending
    page = _get(f"/chat/customer-service?session={out.session_id}")
    html, headers = page["body"], page["headers"]
    assert page["statusCode"] == 200 and headers["content-type"].startswith("text/html")
    assert (
        "script-src 'self'" in headers["content-security-policy"] and headers["cache-control"] == "no-store"
    )
    # no inline script or style anywhere: the one script is a file of this origin
    assert re.findall(r"<script[^>]*>", html) == [
        f'<script type="module" src="{render.asset_url("chat.js")}">'
    ]
    assert "<style" not in html and not re.search(r"<[^>]*\s(style|on[a-z]+)\s*=", html)
    # the message is text, never markup
    assert "<script>alert" not in html and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp;" in html
    assert f'data-session-id="{out.session_id}"' in html and f'data-turn-id="{out.turn_id}"' in html
    cursor = int(re.search(r'data-cursor="(\d+)"', html).group(1))  # type: ignore[union-attr]
    assert cursor == len(engine.audit(out.turn_id))  # the script follows on from here
    roles = re.findall(r'<li class="entry [^"]*" data-role="(\w+)"', html)
    assert roles == ["user", "tool", "tool"]
    [item] = out.pending
    card = html[html.index(f'data-pending-id="{item.pending_id}"') :]
    assert 'data-kind="approval" data-tool="issue_refund" data-state="open"' in card
    assert 'name="decision" value="approve"' in card and 'name="decision" value="deny"' in card
    assert 'data-arg="amount" data-control="arg.amount" data-kind="number"' in card
    assert 'name="arg.amount" type="number"' in card and 'name="comment"' in card


def test_what_became_of_each_card_and_how_the_turn_ended(engine: Engine) -> None:
    denied = engine.send_message("customer-service", "Order A-1001 arrived broken.", sender=ADMIN)
    engine.resolve(denied.pending[0].pending_id, Denial(comment="ask finance"), ADMIN)
    html = _get(f"/chat/customer-service?session={denied.session_id}")["body"]
    assert 'data-state="denied"' in html and "Denied by user:admin (“ask finance”)" in html
    assert 'class="entry note" data-state="denied"' in html and "data-turn-id" not in html
    stopped = engine.send_message("customer-service", "hello, something went wrong", sender=ADMIN)
    engine.cancel(stopped.turn_id, ADMIN)
    html = _get(f"/chat/customer-service?session={stopped.session_id}")["body"]
    assert 'data-kind="question" data-tool="system_ask_user" data-state="closed"' in html
    assert "Not decided: the turn was stopped first." in html and 'data-state="cancelled"' in html
    assert (
        'name="answer"' not in html
        and 'name="cancel" class="stop" aria-describedby="stop-hint" hidden' in html
    )


def test_another_tenants_or_agents_conversation_and_what_is_not_there_are_refused(engine: Engine) -> None:
    mine = engine.send_message("customer-service", "Order A-1001 arrived broken.", sender=ADMIN)
    for path, user, password in (
        (f"/chat/customer-service?session={mine.session_id}", "alice", "pw"),  # another tenant's
        ("/chat/customer-service?session=ses_0123456789abcdef0123456789abcdef", "admin", "secret"),
        ("/chat/no-such-agent", "admin", "secret"),
    ):
        page = _get(path, user, password)
        assert page["statusCode"] == 404, (path, page["body"][:300])
        assert 'data-state="not-found"' in page["body"] and mine.session_id not in page["body"]
    outside = _get("/chat/customer-service?tenant=globex", "alice", "pw")
    assert outside["statusCode"] == 403 and outside["headers"]["content-type"].startswith("text/html")
    own = _get("/chat/customer-service", "alice", "pw")
    assert own["statusCode"] == 200 and "tenants" not in own["body"] and "acme" in own["body"]


@pytest.mark.parametrize(
    ("asset", "kind"),
    [("chat.js", "text/javascript"), ("chat.css", "text/css"), ("loopengine-client.js", "text/javascript")],
)
def test_the_files_are_served_kept_only_by_their_version(engine: Engine, asset: str, kind: str) -> None:
    named = _get(f"/chat/static/{asset}")
    assert named["statusCode"] == 200 and named["headers"]["content-type"].startswith(kind)
    assert (
        named["headers"]["cache-control"] == "no-cache"
        and named["headers"]["x-content-type-options"] == "nosniff"
    )
    versioned = _get(render.asset_url(asset))
    assert versioned["headers"]["cache-control"].startswith("private") and versioned["body"] == named["body"]
    assert _get(f"/chat/static/{asset}?v=0")["headers"]["cache-control"] == "no-cache"  # an old version


def test_no_other_file_is_served(engine: Engine) -> None:
    for name in ("chat.html", "..%2Frender.py", "inbox.js"):
        page = _get(f"/chat/static/{name}")
        assert page["statusCode"] == 404 and page["headers"]["content-type"].startswith("text/html")


def _post_message(**headers: str) -> dict[str, Any]:
    event = load_event("post_message")
    event["headers"] = {**event["headers"], **headers}
    result: dict[str, Any] = api.handler(event, lambda_context(FakeContext()))
    return result


def test_a_change_another_sites_page_sends_from_a_browser_is_refused(engine: Engine) -> None:
    """The browser keeps the credentials the chat page logged in with and sends them with requests
    other sites' pages make (a text/plain POST needs no preflight): those change nothing."""
    host = load_event("post_message")["headers"]["host"]
    for headers in (
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
        {"origin": "https://evil.example"},
        {"origin": "null"},
        {"sec-fetch-site": "same-origin", "origin": "https://evil.example"},
    ):
        refused = _post_message(**headers)
        assert refused["statusCode"] == 403, (headers, refused)
        assert json.loads(refused["body"])["error"] == "cross_site"
    assert engine.open_items(who=ADMIN) == []  # nothing was started
    # the page's own requests (same origin), and clients that are no browser, go through
    assert (
        _post_message(**{"sec-fetch-site": "same-origin", "origin": f"https://{host}"})["statusCode"] == 202
    )
    assert _post_message()["statusCode"] == 202
    # reads are never refused: a link from elsewhere may open a page or a turn
    assert _get("/chat/customer-service", **{"sec-fetch-site": "cross-site"})["statusCode"] == 200
