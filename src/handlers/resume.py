"""The ``resume`` Lambda: see :mod:`loopengine.http.resume`; SnapStart: :mod:`loopengine.http.snapstart`."""

from loopengine.http import snapstart

with snapstart.loading("resume"):  # the dependencies are loaded; the collector pauses while ours load
    from loopengine.http.resume import handler

__all__ = ["handler"]
