"""The conversation in the browser (``GET /chat/{agent}``): headless Chromium against ``loopengine dev``.

The server runs as a user runs it (a subprocess on 127.0.0.1, ``admin:secret``, and a user ``alice``
of tenant ``acme``), its model the real Anthropic SDK talking to a local stand-in of the Messages API
(``scripts/scripted_messages_api.py``: the customer-service agent's own script, streamed as the API
streams, a few characters every 80 ms). One browser session carries DESIGN's scenario through:

- a message typed and sent with Enter; the refund's card appears in the thread, and a reload by
  ``?session=`` shows it open where it was (the Monday case);
- an edit the magic-link form would refuse is refused in the card (nothing decided), an edit to 100
  is approved by a click, the chained email's card appears (about 100.00 USD) and is approved from the
  keyboard; the final answer arrives in pieces while the model talks; the audit says who decided
  (the signed-in ``user:admin``, declared channel ``chat``); a reload by session shows the same thread;
- a second conversation: the agent's question answered from its card, then Stop on the refund's card:
  the turn is cancelled and the page says what Stop cannot undo;
- ``alice`` (another tenant; another origin, ``localhost``, so the browser keeps her login apart)
  gets 404 for the admin's session;
- no Content-Security-Policy violation and no console error on any page.

Needs Debian's ``chromium`` and ``chromium-driver`` (skipped without them, saying why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser_support import (
    NO_BROWSER,
    console_problems,
    has_browser,
    start_chromium,
    violations,
)
from tests.dev_support import DevProcess, admin_env, free_port, request

ROOT = Path(__file__).resolve().parent.parent
STAND_IN = ROOT / "scripts" / "scripted_messages_api.py"
SCRIPT = ROOT / "src" / "agents" / "customer_service" / "script.py"
USERS = [{"user": "alice", "password": "pw", "tenants": ["acme"]}]
MESSAGE = "Order A-1001 arrived broken, please refund it."
RECORD_TEXTS = """
window.__texts = [];
new MutationObserver(function () {
  document.querySelectorAll("#thread [data-role=assistant]").forEach(function (e) {
    var t = e.textContent;
    if (t && window.__texts.indexOf(t) < 0) { window.__texts.push(t); }
  });
}).observe(document.getElementById("thread"), {subtree: true, childList: true, characterData: true});
"""
"""Every text an assistant entry of the thread shows, as it changes (installed once the page is loaded)."""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("anthropic-sdk"),
    pytest.mark.skipif(not has_browser(), reason=NO_BROWSER),
]


@pytest.fixture
def messages_api(tmp_path: Path) -> Iterator[str]:
    """The stand-in Messages API (a subprocess): its URL."""
    proc = subprocess.Popen(
        [sys.executable, str(STAND_IN), "--script", str(SCRIPT), "--port", "0", "--gap", "0.08"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # "Messages API stand-in on http://127.0.0.1:PORT (...)"
    try:
        assert "http://127.0.0.1:" in first, first
        yield first.split(" on ", 1)[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


@pytest.fixture
def server(tmp_path: Path, messages_api: str) -> Iterator[DevProcess]:
    env = admin_env(tmp_path / "chat.db", LOOPENGINE_USERS=json.dumps(USERS))
    env.pop("LOOPENGINE_MODEL")
    env.update(ANTHROPIC_API_KEY="standin", ANTHROPIC_BASE_URL=messages_api)
    srv = DevProcess(env, free_port(), log=tmp_path / "dev.log", args=("--sweep-interval", "0"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    driver = start_chromium(tmp_path)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """Waits on the page's DOM states; every element is found afresh (the page replaces its thread)."""

    def __init__(self, driver: Any) -> None:
        from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.wait = WebDriverWait(
            driver, 30, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
        )

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.wait.until(lambda d: d.find_element(By.CSS_SELECTOR, css))

    def read(self, css: str, what: Callable[[Any], Any] = lambda element: element.text) -> Any:
        """``what`` of the element ``css`` finds, read again if the page replaced it meanwhile."""
        from selenium.webdriver.common.by import By

        box: list[Any] = []

        def read_once(d: Any) -> bool:
            box.append(what(d.find_element(By.CSS_SELECTOR, css)))
            return True

        self.wait.until(read_once)
        return box[-1]

    def gone(self, css: str) -> None:
        from selenium.webdriver.common.by import By

        self.wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, css))

    def act(self, css: str, do: Callable[[Any], object]) -> None:
        """Find ``css`` and ``do`` it, again if the page replaced the element meanwhile."""
        self.wait.until(lambda _d: do(self.find(css)) or True)

    def until(self, check: Callable[[Any], Any]) -> Any:
        return self.wait.until(check)

    def thread(self) -> list[tuple[str, str, str]]:
        """(role, tool, text) of each entry of the thread, as a reader sees it."""
        rows: list[list[str]] = self.driver.execute_script(
            "return Array.from(document.querySelectorAll('#thread > li'), function (e) {"
            "  return [e.getAttribute('data-role') || 'note', e.getAttribute('data-tool') || '',"
            "          e.textContent.replace(/\\s+/g, ' ').trim()]; });"
        )
        return [(r[0], r[1], r[2]) for r in rows]


# a card the server rendered (the script's own, drawn from the event, has no id), open
def _card(tool: str) -> str:
    return f'article.card[id^="card-"][data-tool="{tool}"][data-state="open"]'


def _approve(tool: str) -> str:
    return _card(tool) + ' button[name="decision"][value="approve"]'


def test_a_conversation_in_the_browser(server: DevProcess, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    page = Page(browser)
    base = f"http://127.0.0.1:{server.port}"

    # GIVEN the page, logged in with Basic credentials in the URL (the 401 challenge answered)
    browser.get(f"http://admin:secret@127.0.0.1:{server.port}/chat/customer-service")
    assert browser.find_elements("css selector", "main[data-session-id]") == []
    body_background = browser.execute_script("return getComputedStyle(document.body).backgroundColor;")
    assert body_background == "rgb(244, 245, 247)"  # the stylesheet came from its route and applies

    # WHEN a message is typed and sent with Enter
    page.act("form#composer textarea[name=message]", lambda box: box.send_keys(MESSAGE, Keys.ENTER))

    # THEN the conversation has a session, the lookup ran, and the refund's card is in the thread
    session_id = page.find("main[data-session-id]").get_attribute("data-session-id")
    assert session_id.startswith("ses_")
    page.find("#thread [data-role=user]")
    page.find('#thread [data-role=tool][data-tool="lookup_order"]')
    refund, kind = page.read(
        _card("issue_refund"), lambda c: (c.get_attribute("data-pending-id"), c.get_attribute("data-kind"))
    )
    assert kind == "approval" and refund.startswith("pnd_")
    assert browser.find_element("css selector", "button[name=cancel]").is_displayed()

    # WHEN the page is opened again by its session (on Monday): THEN the card is open where it was
    browser.get(f"{base}/chat/customer-service?session={session_id}")
    assert page.read(_card("issue_refund"), lambda card: card.get_attribute("data-pending-id")) == refund
    assert [role for role, _tool, _text in page.thread()] == ["user", "tool", "tool"]
    browser.execute_script(RECORD_TEXTS)

    # WHEN the amount is edited to something the schema's form refuses: THEN the card says why
    amount = _card("issue_refund") + ' input[name="arg.amount"]'
    page.act(amount, lambda field: (field.clear(), field.send_keys("-")))
    page.act(_approve("issue_refund"), lambda button: button.click())
    alert = page.read(_card("issue_refund") + " p.error[role=alert]:not([hidden])")
    assert "amount: a value is required" in alert, alert

    # WHEN the amount is 100 and Approve is clicked: THEN the chained email's card comes, about 100.00
    page.act(amount, lambda field: (field.clear(), field.send_keys("100")))
    page.act(_approve("issue_refund"), lambda button: button.click())
    body = page.read(_card("send_email") + ' [name="arg.body"]', lambda field: field.get_attribute("value"))
    assert "100.00 USD" in body, body
    assert "Approved by user:admin, with edits" in page.read(
        '[data-tool="issue_refund"][data-state="approved"]'
    )
    browser.save_screenshot(str(tmp_path / "chat.png"))  # docs/chat.png: the chained card, open

    # WHEN the email is approved from the keyboard: THEN the answer streams in, in pieces
    page.act(_approve("send_email"), lambda button: button.send_keys(Keys.ENTER))
    final = page.read("#thread [data-role=assistant]:not([data-streaming])")
    assert final.startswith("Done: order A-1001 was refunded") and "100.00 USD" in final
    texts: list[str] = browser.execute_script("return window.__texts;")
    pieces = [t for t in texts if t and final.startswith(t) and t != final]
    assert len(pieces) >= 2, texts  # shown while the model was still talking
    page.gone("button[name=cancel]:not([hidden])")
    settled = page.thread()

    # AND the decisions were the signed-in principal's, declared as the chat page's
    turn_id = browser.find_element("css selector", "main").get_attribute("data-turn-id")
    _status, turn = request(server.port, "GET", f"/turns/{turn_id}")
    decided = [
        (e["decidedBy"], e["channel"], e.get("declaredChannel"), e["edited"])
        for e in turn["audit"]
        if e["type"] == "decided"
    ]
    assert decided == [("user:admin", "api", "chat", True), ("user:admin", "api", "chat", False)]

    # WHEN the page is opened again by its session: THEN everything is where it was
    browser.get(f"{base}/chat/customer-service?session={session_id}")
    page.find("#thread [data-role=assistant]")
    assert page.thread() == settled
    assert [r for r, _t, _x in settled] == ["user", "tool", "tool", "tool", "tool", "tool", "assistant"]

    # WHEN a new conversation asks something the agent must ask back about
    browser.get(f"{base}/chat/customer-service")
    page.act("textarea[name=message]", lambda box: box.send_keys("hello, something went wrong", Keys.ENTER))
    assert "Which order is this about?" in page.read('[data-kind="question"][data-state="open"][id^="card-"]')
    page.act('[data-kind="question"][data-state="open"] [name=answer]', lambda f: f.send_keys("A-1001"))
    page.act('[data-kind="question"][data-state="open"] button[name=send]', lambda b: b.click())

    # THEN the answer took it on to the refund; and Stop cancels the turn, saying what it cannot undo
    page.find(_card("issue_refund"))
    assert "Answered by user:admin" in page.read('[data-kind="question"][data-state="answered"]')
    page.act("button[name=cancel]", lambda button: button.click())
    assert "What had already run stays done" in page.read('#thread .note[data-state="cancelled"]')
    page.find('[data-tool="issue_refund"][data-state="closed"]')
    assert "already ran keep their effects" in browser.find_element("id", "chat-status").text
    second = browser.find_element("css selector", "main").get_attribute("data-turn-id")
    _status, stopped = request(server.port, "GET", f"/turns/{second}")
    assert (stopped["status"], stopped["stopReason"]) == ("finished", "cancelled")
    assert violations(browser) == []
    assert console_problems(browser) == [], json.dumps(browser.get_log("browser"), indent=1)

    # WHEN alice, of another tenant, opens the admin's conversation: THEN there is no such thing
    browser.get(f"http://alice:pw@localhost:{server.port}/chat/customer-service?session={session_id}")
    main = page.find("main")
    assert main.get_attribute("data-state") == "not-found", browser.page_source
    assert violations(browser) == []
    assert [p for p in console_problems(browser) if "404" not in p] == []
    if os.environ.get("LOOPENGINE_CHAT_SCREENSHOT"):  # docs/chat.png
        Path(os.environ["LOOPENGINE_CHAT_SCREENSHOT"]).write_bytes((tmp_path / "chat.png").read_bytes())
