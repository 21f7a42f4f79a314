"""The ``schedule`` Lambda: see :mod:`loopengine.http.schedule`."""

from loopengine.http.schedule import handler

__all__ = ["handler"]
