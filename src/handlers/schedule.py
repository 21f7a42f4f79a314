"""The ``schedule`` Lambda: see :mod:`loopengine.http.schedule`; hooks: :mod:`loopengine.http.snapstart`."""

from loopengine.http import snapstart

with snapstart.loading("schedule"):  # the dependencies are loaded; the collector pauses while ours load
    from loopengine.http.schedule import handler

__all__ = ["handler"]
