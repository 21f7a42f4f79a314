"""The ``resume`` Lambda: see :mod:`loopengine.http.resume`."""

from loopengine.http.resume import handler

__all__ = ["handler"]
