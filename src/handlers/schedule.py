"""The ``schedule`` Lambda: see :mod:`loopengine.http.functions.schedule`.

Hooks: :mod:`loopengine.http.functions.snapstart`.
"""

from loopengine.http.functions import snapstart

with snapstart.loading("schedule"):  # the dependencies are loaded; the collector pauses while ours load
    from loopengine.http.functions.schedule import handler

__all__ = ["handler"]
