"""The ``api`` Lambda: see :mod:`loopengine.http.api`."""

from loopengine.http.api import handler

__all__ = ["handler"]
