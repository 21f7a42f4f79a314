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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser_support import (
    NO_BROWSER,
    console_problems,
    has_browser,
    left_page,
    shown,
    start_chromium,
    violations,
    wait_for,
)
from tests.dev_support import DevProcess, admin_env, free_port, request

MESSAGE = "Order A-1001 arrived broken."
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not has_browser(), reason=NO_BROWSER),
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevProcess]:
    srv = DevProcess(admin_env(tmp_path / "inbox.db"), free_port(), log=tmp_path / "dev.log")
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


def _park(server: DevProcess) -> dict[str, Any]:
    status, paused = request(server.port, "POST", "/agents/customer-service/messages", {"message": MESSAGE})
    assert status == 202, paused
    assert paused["pendingItems"][0]["tool"] == "issue_refund"
    return paused


def test_approve_in_the_inbox_and_see_it_refresh_from_the_turn_events(
    server: DevProcess, browser: Any, tmp_path: Path
) -> None:
    """Every read waits for a state of the page (:func:`wait_for`): the page may reload itself at
    any moment (when a turn it shows moves on), and an element read after that is stale."""
    from selenium.webdriver.common.by import By

    first, second = _park(server), _park(server)
    mine, theirs = first["pendingItems"][0]["pendingId"], second["pendingItems"][0]["pendingId"]
    base = f"http://127.0.0.1:{server.port}"

    def listed(d: Any) -> list[str]:
        return [a.get_attribute("data-pending-id") for a in d.find_elements(By.CSS_SELECTOR, "article.item")]

    # GIVEN the inbox, logged in with Basic credentials in the URL (the 401 challenge answered)
    browser.get(f"http://admin:secret@127.0.0.1:{server.port}/inbox")
    wait_for(
        browser, lambda d: (shown(d, "main", "data-state") or {}).get("data-state") == "inbox", "the inbox"
    )
    assert wait_for(browser, lambda d: listed(d) == [mine, theirs], "both items listed")
    # the stylesheet came from its own route (behind the same auth) and applies
    body_background = browser.execute_script("return getComputedStyle(document.body).backgroundColor;")
    assert body_background == "rgb(244, 245, 247)"
    card = wait_for(browser, lambda d: shown(d, f"#item-{mine}"), "the first card")
    assert "issue_refund" in (card["text"] or "") and "Who may decide" in (card["text"] or "")
    browser.save_screenshot(str(tmp_path / "inbox.png"))

    # WHEN the first refund is edited to 100 and approved by clicking (all on one document: if the
    # page reloads itself meanwhile, the edit starts again on the new one)
    def edit_and_approve(d: Any) -> Any:
        if shown(d, "p.flash"):  # the click went through, though the driver reported otherwise
            return "posted"
        page = d.find_element(By.TAG_NAME, "main")
        item = d.find_element(By.ID, f"item-{mine}")
        amount = item.find_element(By.NAME, "arg.amount")
        assert float(amount.get_attribute("value") or "nan") in (212.0, 100.0)
        amount.clear()
        amount.send_keys("100")
        item.find_element(By.CSS_SELECTOR, 'button[name="decision"][value="approve"]').click()
        return page

    main = wait_for(browser, edit_and_approve, "the edit and the click")
    if main != "posted":
        wait_for(browser, left_page(main), "the form to post")

    # THEN the page says so, and the item is gone from the list
    def flashed(state: str) -> Callable[[Any], dict[str, str | None] | None]:
        def check(d: Any) -> dict[str, str | None] | None:
            flash = shown(d, "p.flash", "data-state", "data-pending-id")
            return flash if flash is not None and flash["data-state"] == state else None

        return check

    flash = wait_for(browser, flashed("approved"), "the flash saying approved")
    assert "You approved issue_refund with your edits" in (flash["text"] or "")
    assert wait_for(
        browser, lambda d: theirs in listed(d) and mine not in listed(d), "mine gone, theirs kept"
    )
    status, turn = request(server.port, "GET", f"/turns/{first['turnId']}")
    [decided] = [e for e in turn["audit"] if e["type"] == "decided"]
    assert decided["channel"] == "inbox" and decided["edited"] is True
    assert decided["decidedBy"] in ("admin", "user:admin")

    # AND once the approved turn has run the refund, it parks on its confirmation email: the page
    # shows that item too (at once, or by reloading itself when the turn's events say so)
    def email_item(d: Any) -> bool:
        cards = [a.text for a in d.find_elements(By.CSS_SELECTOR, "article.item")]
        return any("send_email" in text for text in cards) and theirs in listed(d)

    wait_for(browser, email_item, "the email's item beside the other refund")

    # WHEN the other refund is denied elsewhere (the JSON API) while the page is open
    body = {"decision": "deny", "comment": "decided elsewhere"}
    status, denied = request(server.port, "POST", f"/pending-approvals/{theirs}/resolve", body)
    assert status == 200, denied

    # THEN the page reloads by itself from that turn's events, and the item is gone
    def refreshed(d: Any) -> bool:
        cards = [a.text for a in d.find_elements(By.CSS_SELECTOR, "article.item")]
        return theirs not in listed(d) and any("send_email" in text for text in cards)

    wait_for(browser, refreshed, "the page to drop the item denied elsewhere")
    flash = wait_for(browser, flashed("approved"), "the flash of the one decided here")
    assert flash["data-pending-id"] == mine
    assert browser.current_url == f"{base}/inbox?item={mine}"
    browser.save_screenshot(str(tmp_path / "inbox_refreshed.png"))

    # AND no Content-Security-Policy violation or console error happened on any of the pages
    assert violations(browser) == []
    assert console_problems(browser) == [], json.dumps(browser.get_log("browser"), indent=1)


def test_a_cross_site_form_post_is_refused_in_the_browser(server: DevProcess, browser: Any) -> None:
    paused = _park(server)
    pending = paused["pendingItems"][0]["pendingId"]
    browser.get(f"http://admin:secret@127.0.0.1:{server.port}/inbox")
    csrf = wait_for(browser, lambda d: shown(d, f'#item-{pending} input[name="csrf"]', "value"), "the form")
    token = csrf["value"]
    # another site (a data: page is an opaque origin) posts the real form, token and all, with the
    # browser's saved credentials: the Origin check refuses it
    page = (
        f'<form id="f" method="post" action="http://127.0.0.1:{server.port}/inbox/items/{pending}">'
        f'<input name="csrf" value="{token}"><input name="decision" value="approve"></form>'
    )
    browser.get("data:text/html," + page)
    browser.execute_script("document.getElementById('f').submit();")
    refused = wait_for(browser, lambda d: shown(d, "main[data-state]", "data-state"), "the refusal")
    assert refused["data-state"] == "cross-site", browser.page_source
    assert "Nothing was decided" in (refused["text"] or "")
    status, turn = request(server.port, "GET", f"/turns/{paused['turnId']}")
    assert status == 200 and turn["status"] == "paused" and turn["pendingItems"][0]["pendingId"] == pending
