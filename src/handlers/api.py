"""The ``api`` Lambda: see :mod:`loopengine.http.api`; SnapStart: :mod:`loopengine.http.snapstart`."""

from loopengine.http import snapstart
from loopengine.http.api import handler

snapstart.init("api")

__all__ = ["handler"]
