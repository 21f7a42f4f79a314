"""What the headless-Chromium tests share: waiting for a page that a click navigates away from."""

from __future__ import annotations

from collections.abc import Callable
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
