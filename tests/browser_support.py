"""What the headless-Chromium tests share: starting the browser, its CSP and console records, and
waiting for a page's state, never racing its navigations.

A page can be replaced at any moment: after a click (the form posts, the answer is another page),
and on the inbox by the page itself, when the turns it shows change (``inbox.js`` reloads it). An
element found on one document is stale on the next, so a test never finds an element and reads it
later: :func:`wait_for` runs a condition that finds what it reads and reads it in one go, again on
the next document whenever the one it read went away mid-way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

T = TypeVar("T")

DETACHED = ("does not belong to the document", "No node with given id found")
"""What chromedriver answers instead of a stale-element error when it asks about an element of the
page being replaced at that moment (CI saw it: ``unhandled inspector error: Node with given id does
not belong to the document``)."""
TIMEOUT = 30.0
"""How long a page gets to reach a state (generous: a loaded machine is slow, never a timing claim)."""


def _replaced(exc: WebDriverException) -> bool:
    """Whether ``exc`` says the element's document went away (not a real failure)."""
    if isinstance(exc, StaleElementReferenceException | NoSuchElementException):
        return True
    return any(words in str(exc) for words in DETACHED)


def wait_for(driver: Any, condition: Callable[[Any], T | None], what: str, timeout: float = TIMEOUT) -> T:
    """``condition(driver)`` once it is truthy; a run that met a replaced page is run again."""

    def tolerant(d: Any) -> T | Literal[False] | None:
        try:
            return condition(d)
        except WebDriverException as exc:
            if _replaced(exc):
                return False
            raise

    result = WebDriverWait(driver, timeout, poll_frequency=0.1).until(tolerant, f"waiting for {what}")
    assert result is not None  # until() returns only a truthy value
    return result


def shown(driver: Any, css: str, *attributes: str) -> dict[str, str | None] | None:
    """The first element matching ``css``: its text and ``attributes``, read from one document.

    None when there is none. For use inside a :func:`wait_for` condition (a replaced page raises).
    """
    found = driver.find_elements(By.CSS_SELECTOR, css)
    if not found:
        return None
    return {"text": found[0].text, **{name: found[0].get_attribute(name) for name in attributes}}


def left_page(element: Any) -> Callable[[Any], bool]:
    """A wait condition: ``element``'s page is gone (selenium's ``staleness_of``, with chromedriver's
    answer for an element detached mid-navigation counted as gone too)."""

    def gone(_driver: Any) -> bool:
        try:
            element.is_enabled()
        except WebDriverException as exc:
            if _replaced(exc):
                return True
            raise
        return False

    return gone


CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
NO_BROWSER = (
    f"browser test skipped: {CHROMIUM} or {CHROMEDRIVER} is missing; as root on Debian, "
    "LOOPENGINE_INSTALL_BROWSER=1 make test installs chromium and chromium-driver "
    "(scripts/ensure_chromium.sh; .ci/run does this)"
)
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__violations.push(e.violatedDirective + " " + e.blockedURI);
});
"""
"""Installed before any page script: collects every Content-Security-Policy violation of the page."""


def has_browser() -> bool:
    """Whether Debian's chromium and chromium-driver are installed."""
    return CHROMIUM.exists() and CHROMEDRIVER.exists()


def start_chromium(folder: Path, size: str = "1000,1400") -> Any:
    """Headless Chromium (its profile and chromedriver's log in ``folder``), recording CSP violations."""
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
        f"--window-size={size}",
        f"--user-data-dir={folder / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=str(CHROMEDRIVER), log_output=str(folder / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_VIOLATIONS})
    return driver


def violations(driver: Any) -> list[str]:
    """The CSP violations the current page recorded."""
    found: list[str] = driver.execute_script("return window.__violations || [];")
    return found


def console_problems(driver: Any) -> list[str]:
    """The browser's console errors and warnings (and any CSP report) since the last read."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] in ("SEVERE", "WARNING") or "Content Security Policy" in entry["message"]
    ]
