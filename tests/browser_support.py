"""What the headless-Chromium tests share: starting the browser, its CSP and console records, and
waiting for a page that a click navigates away from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

DETACHED = ("does not belong to the document", "No node with given id found")
"""What chromedriver answers instead of a stale-element error when it asks about an element of the
page being replaced at that moment (CI saw it: ``unhandled inspector error: Node with given id does
not belong to the document``)."""


def left_page(element: Any) -> Callable[[Any], bool]:
    """A wait condition: ``element``'s page is gone (selenium's ``staleness_of``, with chromedriver's
    answer for an element detached mid-navigation counted as gone too)."""

    def gone(_driver: Any) -> bool:
        try:
            element.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if any(words in str(exc) for words in DETACHED):
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
