"""The ``schedule`` Lambda: see :mod:`loopengine.http.schedule`; hooks: :mod:`loopengine.http.snapstart`."""

from loopengine.http import snapstart
from loopengine.http.schedule import handler

snapstart.init("schedule")

__all__ = ["handler"]
