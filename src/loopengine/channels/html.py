"""What the channels' Jinja2 pages (the inbox, the chat page) share.

* :func:`environment`: the one way a page is rendered from Jinja2 templates (a package's
  ``templates/``): ``autoescape=True`` and ``StrictUndefined``, nothing marked safe; Jinja2 is
  imported when the first page is rendered, not when the api starts;
* :class:`StaticFiles`: a package's ``static/`` files by name (only the names it lists), each
  addressed by a hash of its content (``?v=``) so a changed file is fetched again;

Every failure of a page handler is a page through :func:`loopengine.http.web.guarded` (the edge's).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

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
