"""What the channels' HTML pages (the inbox, the chat page, the magic-link pages) share.

* :func:`environment`: the one way a page is rendered from Jinja2 templates (a package's
  ``templates/``): ``autoescape=True`` and ``StrictUndefined``, nothing marked safe; Jinja2 is
  imported when the first page is rendered, not when the api starts;
* :class:`StaticFiles`: a package's ``static/`` files by name (only the names it lists), each
  addressed by a hash of its content (``?v=``) so a changed file is fetched again;
* :func:`guarded` and :class:`Stop`: every failure of a page handler as a page, never a 500 with a
  stack trace: a refusal (4xx) says why, a store or model failure asks to try again, anything else
  is logged and says something went wrong.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler import Response

from loopengine.channels.magic import pages as magic_pages
from loopengine.domain.base import errors
from loopengine.http import web
from loopengine.http.observability import logger

if TYPE_CHECKING:
    import jinja2


@functools.cache
def environment(*packages: str) -> jinja2.Environment:
    """The templates of ``packages`` (the first that has a name wins), auto-escaped and strict."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.ChoiceLoader([jinja2.PackageLoader(package, "templates") for package in packages]),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


@functools.cache
def _read(package: str, name: str) -> str:
    return resources.files(package).joinpath("static", name).read_text(encoding="utf-8")


@functools.cache
def _version(package: str, name: str) -> str:
    return hashlib.sha256(_read(package, name).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class StaticFiles:
    """The static files of ``package`` served under ``path``: only ``types``' names, with their types."""

    package: str
    path: str
    types: Mapping[str, str]

    def asset(self, name: str) -> tuple[str, str] | None:
        """(content type, text) of a static file by name; None for any name not in ``types``."""
        content_type = self.types.get(name)
        if content_type is None:
            return None
        return content_type, _read(self.package, name)

    def version(self, name: str) -> str:
        """A static file's content hash (what its versioned URL carries); "0" for an unknown name."""
        return _version(self.package, name) if name in self.types else "0"

    def url(self, name: str) -> str:
        """The URL of a static file, versioned by its content so a changed file is fetched again."""
        return f"{self.path}{name}?v={self.version(name)}"


class Stop(Exception):
    """Stop handling and answer with this page."""

    def __init__(self, response: Response[str]) -> None:
        super().__init__(response.status_code)
        self.response = response


def guarded(
    run: Callable[[], Response[str]],
    where: str,
    page: Callable[[int, magic_pages.Message], Response[str]],
    refused: Callable[[int, str], Response[str]],
    *,
    unavailable: int | None = 503,
) -> Response[str]:
    """``run()``, with every failure as a page: bad input is a 4xx page, never a 500 or a stack trace.

    A :class:`Stop` answers its page; a refusal (an error whose status is under 500) is
    ``refused(status, why)``; a store or model failure is ``page`` with
    :data:`~loopengine.channels.magic.pages.TRY_AGAIN` as ``unavailable`` (``None``: the error's own
    status, 503 for a 500); anything else is logged and ``page`` with ``BROKEN`` as 500. ``where``
    names the page in the log.
    """
    try:
        return run()
    except Stop as stop:
        return stop.response
    except errors.LoopengineError as exc:
        status = next((s for cls, s in web.STATUS if isinstance(exc, cls)), 500)
        if status >= 500:
            logger.warning(f"{where} page failed", extra={"error": type(exc).__name__})
            shown = unavailable if unavailable is not None else (status if status != 500 else 503)
            return page(shown, magic_pages.TRY_AGAIN)
        return refused(status, str(exc))
    except Exception:
        logger.exception(f"{where} page failed")
        return page(500, magic_pages.BROKEN)
