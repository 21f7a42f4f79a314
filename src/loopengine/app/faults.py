"""A fault-injection seam: named crash points in the turn's life, for tests (zero cost when off).

Production code calls :func:`point` at each step boundary where a process could die::

    model_recorded     after the model's response is appended to the session
    tool_claimed       after a tool call is claimed, before the tool runs
    tool_returned      after the tool returned, before its outcome is recorded
    paused             after the pause write (checkpoint, turn, notifications in the outbox)
    decided            after a resolve's write, before the resume invoke
    invoke             the resume invoke itself (an ``Exception`` here is a failed invoke)
    claimed            after a worker claimed a turn, before it advances it
    results_appended   after a batch's tool_result message was appended
    notify             during a notification send
    compaction_summarized  after a compaction's summary call, before its write
    compacted          after a compaction's write, before the model call it made room for

With no injector installed, :func:`point` is one global read. A test installs one with
:func:`inject`; it is called with the point's name and may raise (a ``BaseException`` that the
library never catches is a dying process; an ``Exception`` is an ordinary failure).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

POINTS = (
    "model_recorded",
    "tool_claimed",
    "tool_returned",
    "paused",
    "decided",
    "invoke",
    "claimed",
    "results_appended",
    "notify",
    "compaction_summarized",
    "compacted",
)

_injector: Callable[[str], None] | None = None


def point(name: str) -> None:
    """A place the process could die; calls the installed injector, if any."""
    if _injector is not None:
        _injector(name)


@contextmanager
def inject(injector: Callable[[str], None]) -> Iterator[None]:
    """Install ``injector`` for the duration of the block (tests only; not thread-scoped)."""
    global _injector
    previous, _injector = _injector, injector
    try:
        yield
    finally:
        _injector = previous
