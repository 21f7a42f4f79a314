"""The ``resume`` Lambda: see :mod:`loopengine.http.functions.resume`.

SnapStart: :mod:`loopengine.http.functions.snapstart`.
"""

from loopengine.http.functions import snapstart

with snapstart.loading("resume"):  # the dependencies are loaded; the collector pauses while ours load
    from loopengine.http.functions.resume import handler

__all__ = ["handler"]
