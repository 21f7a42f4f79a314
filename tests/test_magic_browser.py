"""A magic link clicked in a real browser: headless Chromium against ``loopengine dev``.

The server runs as a user runs it (a subprocess on 127.0.0.1); the link is issued here with the
server's secret. The browser loads the confirm page, a human-like edit changes the refund amount,
Approve is clicked, and the API then shows that the refund ran with the edit and the turn went on
to pause on the confirmation email. Needs Debian's ``chromium`` and ``chromium-driver``
(``scripts/ensure_chromium.sh`` installs them when allowed: root, apt-get and
``LOOPENGINE_INSTALL_BROWSER=1``); without them the test is skipped, saying why.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopengine.channels.magic.token import issue_token
from tests.browser_support import NO_BROWSER, has_browser, left_page, shown, start_chromium, wait_for
from tests.dev_support import DevProcess, free_port, request

SECRET = "browser-test-magic-secret"
REVIEWER = "reviewer@example.com"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not has_browser(), reason=NO_BROWSER),
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevProcess]:
    env = {
        **os.environ,
        "LOOPENGINE_DB": str(tmp_path / "browser.db"),
        "LOOPENGINE_ADMIN_AUTH": "admin:secret",
        "LOOPENGINE_MODEL": "scripted",
        "LOOPENGINE_MAGIC_LINK_SECRET": SECRET,
    }
    env.pop("LOOPENGINE_TABLE", None)
    env.pop("LOOPENGINE_DEFAULT_WEBHOOK_URL", None)
    srv = DevProcess(env, free_port(), log=tmp_path / "dev.log")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    driver = start_chromium(tmp_path, size="900,1100")
    try:
        yield driver
    finally:
        driver.quit()


def _wait_for(predicate: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_SIGNATURE), path


def test_approve_with_an_edit_in_headless_chromium(server: DevProcess, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    # GIVEN a turn parked on the refund, and a magic link for its pending item
    status, paused = request(
        server.port, "POST", "/agents/customer-service/messages", {"message": "Order A-1001 arrived broken."}
    )
    assert status == 202, paused
    item = paused["pendingItems"][0]
    assert item["tool"] == "issue_refund"
    token = issue_token(SECRET, item["pendingId"], REVIEWER, time.time() + 3600)
    # WHEN the recipient opens it
    browser.get(f"http://127.0.0.1:{server.port}/magic/{token}")
    main = browser.find_element(By.TAG_NAME, "main")
    assert main.get_attribute("data-state") == "form", browser.page_source
    assert "issue_refund" in browser.find_element(By.TAG_NAME, "h1").text
    assert "customer-service" in main.text
    assert browser.find_element(By.NAME, "arg.order_id").get_attribute("value") == "A-1001"
    amount = browser.find_element(By.NAME, "arg.amount")
    assert amount.get_attribute("type") == "number"
    assert float(amount.get_attribute("value") or "nan") == 212.0
    assert browser.find_element(By.NAME, "arg.reason").get_attribute("value") == "arrived broken"
    browser.save_screenshot(str(tmp_path / "magic_form.png"))
    # AND changes the amount to 100 and clicks Approve
    amount.clear()
    amount.send_keys("100")
    browser.find_element(By.CSS_SELECTOR, 'button[name="decision"][value="approve"]').click()
    # the form page goes away (its elements turn stale), then the result page is there: read in
    # one go from whichever document is there (tests/browser_support.py), never found then read
    wait_for(browser, left_page(main), "the form to post")

    def result_page(d: Any) -> dict[str, str | None] | None:
        found = shown(d, "main", "data-state")
        return found if found is not None and found["data-state"] != "form" else None

    # THEN the result page says it is approved and the agent is resuming
    shown_now = wait_for(browser, result_page, "the result page")
    assert shown_now["data-state"] == "approved", browser.page_source
    assert "the agent is resuming" in (shown_now["text"] or "").lower()
    shot = tmp_path / "magic_approved.png"
    assert browser.save_screenshot(str(shot))
    _assert_png(shot)
    _assert_png(tmp_path / "magic_form.png")
    # AND through the API: the refund ran with 100 and the turn paused again on the email
    turn_id = paused["turnId"]

    def parked_on_email() -> dict[str, Any] | None:
        got, turn = request(server.port, "GET", f"/turns/{turn_id}")
        assert got == 200, turn
        items = turn["pendingItems"]
        return turn if turn["status"] == "paused" and items and items[0]["tool"] == "send_email" else None

    turn = _wait_for(parked_on_email)
    assert turn, request(server.port, "GET", f"/turns/{turn_id}")
    assert "100.00" in turn["pendingItems"][0]["args"]["body"]
    [decision] = [e for e in turn["audit"] if e["type"] == "decided"]
    assert decision["decidedBy"] == f"email:{REVIEWER}" and decision["channel"] == "magic-link"
    assert decision["decision"] == "approve" and decision["edited"] is True
    status, session = request(server.port, "GET", f"/sessions/{paused['sessionId']}")
    assert status == 200
    refund_use = [
        b["id"]
        for m in session["messages"]
        for b in m["content"]
        if b["type"] == "tool_use" and b["name"] == "issue_refund"
    ]
    [result] = [
        json.loads(b["content"])
        for m in session["messages"]
        for b in m["content"]
        if b["type"] == "tool_result" and b["tool_use_id"] in refund_use
    ]
    assert result["reviewer_edited_args"]["amount"] == 100
    assert result["result"]["amount"] == 100.0 and result["result"]["status"] == "issued"
    # AND reloading the link now reports the decision instead of offering it again
    browser.get(f"http://127.0.0.1:{server.port}/magic/{token}")
    again = wait_for(browser, lambda d: shown(d, "main", "data-state"), "the link's page")
    assert again["data-state"] == "already-resolved"
    assert REVIEWER in (again["text"] or "")
