"""The ``api`` Lambda: see :mod:`loopengine.http.api`.

SnapStart: :mod:`loopengine.http.functions.snapstart`.
"""

from loopengine.http.functions import snapstart

with snapstart.loading("api"):  # the dependencies are loaded; the collector pauses while ours load
    from loopengine.http.api import handler

__all__ = ["handler"]
