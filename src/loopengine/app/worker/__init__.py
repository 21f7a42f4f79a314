"""What a worker runs: it claims a turn and advances it.

Resume, loop, claims, pause, batch, tool calls, the sweep. A worker may use what a request records
(:mod:`loopengine.app.request`); a request never imports from here.
"""
