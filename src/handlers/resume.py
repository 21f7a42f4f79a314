"""The ``resume`` Lambda: see :mod:`loopengine.http.resume`; SnapStart: :mod:`loopengine.http.snapstart`."""

from loopengine.http import snapstart
from loopengine.http.resume import handler

snapstart.init("resume")

__all__ = ["handler"]
