"""The approvals inbox in a real browser: headless Chromium against ``loopengine dev``.

The server runs as a user runs it (a subprocess on 127.0.0.1, ``admin:secret``). The browser opens
``http://admin:secret@127.0.0.1:<port>/inbox``: the first answer is the 401 with a Basic challenge,
and Chromium answers it with the URL's credentials and keeps them for the page's stylesheet,
script, long-polls and form posts. Two turns are parked on a refund; one is approved by clicking,
with an edit, and disappears; the other is denied through the JSON API meanwhile, and the page
notices from the turn's events and reloads itself (as it did when the approved turn went on and
parked on its confirmation email). A recorder installed before any page script
collects every Content-Security-Policy violation, and the browser's console log is read as well:
both must stay empty. Needs Debian's ``chromium`` and ``chromium-driver`` (skipped without them,
saying why, as ``tests/test_magic_browser.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser_support import left_page
from tests.dev_support import DevProcess, admin_env, free_port, request

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
MESSAGE = "Order A-1001 arrived broken."
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__violations.push(e.violatedDirective + " " + e.blockedURI);
});
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason=(
            f"browser test skipped: {CHROMIUM} or {CHROMEDRIVER} is missing; as root on Debian, "
            "LOOPENGINE_INSTALL_BROWSER=1 make test installs chromium and chromium-driver "
            "(scripts/ensure_chromium.sh; .ci/run does this)"
        ),
    ),
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevProcess]:
    srv = DevProcess(admin_env(tmp_path / "inbox.db"), free_port(), log=tmp_path / "dev.log")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--no-first-run",
        "--no-default-browser-check",
        "--window-size=1000,1400",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_VIOLATIONS})
    try:
        yield driver
    finally:
        driver.quit()


def _park(server: DevProcess) -> dict[str, Any]:
    status, paused = request(server.port, "POST", "/agents/customer-service/messages", {"message": MESSAGE})
    assert status == 202, paused
    assert paused["pendingItems"][0]["tool"] == "issue_refund"
    return paused


def _violations(browser: Any) -> list[str]:
    found: list[str] = browser.execute_script("return window.__violations || [];")
    return found


def _console_problems(browser: Any) -> list[str]:
    return [
        entry["message"]
        for entry in browser.get_log("browser")
        if entry["level"] in ("SEVERE", "WARNING") or "Content Security Policy" in entry["message"]
    ]


def test_approve_in_the_inbox_and_see_it_refresh_from_the_turn_events(
    server: DevProcess, browser: Any, tmp_path: Path
) -> None:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    first, second = _park(server), _park(server)
    mine, theirs = first["pendingItems"][0]["pendingId"], second["pendingItems"][0]["pendingId"]
    base = f"http://127.0.0.1:{server.port}"

    # GIVEN the inbox, logged in with Basic credentials in the URL (the 401 challenge answered)
    browser.get(f"http://admin:secret@127.0.0.1:{server.port}/inbox")
    main = browser.find_element(By.TAG_NAME, "main")
    assert main.get_attribute("data-state") == "inbox", browser.page_source
    items = [
        a.get_attribute("data-pending-id") for a in browser.find_elements(By.CSS_SELECTOR, "article.item")
    ]
    assert items == [mine, theirs]
    # the stylesheet came from its own route (behind the same auth) and applies
    body_background = browser.execute_script("return getComputedStyle(document.body).backgroundColor;")
    assert body_background == "rgb(244, 245, 247)"
    card = browser.find_element(By.ID, f"item-{mine}")
    assert "issue_refund" in card.text and "Who may decide" in card.text
    browser.save_screenshot(str(tmp_path / "inbox.png"))

    # WHEN the first refund is edited to 100 and approved by clicking
    amount = card.find_element(By.NAME, "arg.amount")
    assert float(amount.get_attribute("value") or "nan") == 212.0
    amount.clear()
    amount.send_keys("100")
    card.find_element(By.CSS_SELECTOR, 'button[name="decision"][value="approve"]').click()
    WebDriverWait(browser, 20).until(left_page(main))
    settled = WebDriverWait(
        browser, 20, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
    )
    flash = settled.until(lambda d: d.find_element(By.CSS_SELECTOR, "p.flash"))

    # THEN the page says so, and the item is gone from the list
    assert flash.get_attribute("data-state") == "approved", browser.page_source
    assert "You approved issue_refund with your edits" in flash.text
    assert browser.find_elements(By.ID, f"item-{mine}") == []
    assert browser.find_elements(By.ID, f"item-{theirs}")
    status, turn = request(server.port, "GET", f"/turns/{first['turnId']}")
    [decided] = [e for e in turn["audit"] if e["type"] == "decided"]
    assert decided["channel"] == "inbox" and decided["edited"] is True
    assert decided["decidedBy"] in ("admin", "user:admin")

    # AND once the approved turn has run the refund, it parks on its confirmation email: the page
    # shows that item too (at once, or by reloading itself when the turn's events say so)
    def email_item(d: Any) -> Any:
        found = [a for a in d.find_elements(By.CSS_SELECTOR, "article.item") if "send_email" in a.text]
        return found[0] if found else None

    settled.until(email_item)
    assert browser.find_elements(By.ID, f"item-{theirs}")

    # WHEN the other refund is denied elsewhere (the JSON API) while the page is open
    body = {"decision": "deny", "comment": "decided elsewhere"}
    status, denied = request(server.port, "POST", f"/pending-approvals/{theirs}/resolve", body)
    assert status == 200, denied

    # THEN the page reloads by itself from that turn's events, and the item is gone
    settled.until(lambda d: not d.find_elements(By.ID, f"item-{theirs}"))
    assert settled.until(email_item)
    flash = browser.find_element(By.CSS_SELECTOR, "p.flash")  # what became of the one decided here
    assert flash.get_attribute("data-state") == "approved" and flash.get_attribute("data-pending-id") == mine
    assert browser.current_url == f"{base}/inbox?item={mine}"
    browser.save_screenshot(str(tmp_path / "inbox_refreshed.png"))

    # AND no Content-Security-Policy violation or console error happened on any of the pages
    assert _violations(browser) == []
    assert _console_problems(browser) == [], json.dumps(browser.get_log("browser"), indent=1)


def test_a_cross_site_form_post_is_refused_in_the_browser(server: DevProcess, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    paused = _park(server)
    pending = paused["pendingItems"][0]["pendingId"]
    browser.get(f"http://admin:secret@127.0.0.1:{server.port}/inbox")
    token = browser.find_element(By.CSS_SELECTOR, f'#item-{pending} input[name="csrf"]').get_attribute(
        "value"
    )
    # another site (a data: page is an opaque origin) posts the real form, token and all, with the
    # browser's saved credentials: the Origin check refuses it
    page = (
        f'<form id="f" method="post" action="http://127.0.0.1:{server.port}/inbox/items/{pending}">'
        f'<input name="csrf" value="{token}"><input name="decision" value="approve"></form>'
    )
    browser.get("data:text/html," + page)
    browser.execute_script("document.getElementById('f').submit();")
    refused = WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "main[data-state]"))
    assert refused[0].get_attribute("data-state") == "cross-site", browser.page_source
    assert "Nothing was decided" in refused[0].text
    status, turn = request(server.port, "GET", f"/turns/{paused['turnId']}")
    assert status == 200 and turn["status"] == "paused" and turn["pendingItems"][0]["pendingId"] == pending
