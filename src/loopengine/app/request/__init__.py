"""What a request records: decisions, stops, expiry, items, the hand-off to the worker.

Nothing here claims a turn or runs a call: a request writes its decision down and hands the turn
to the worker (:mod:`loopengine.app.worker.runner`), which never imports back into a request.
"""
