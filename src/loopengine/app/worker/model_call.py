"""A model call the turn can walk away from: for its time budget, or for a stop.

A model call has no side effect, so the worker never has to wait for one it no longer wants:

* **the budget.** In a request (the api function) the worker waits only until the turn's time
  budget is spent; then it abandons the call and hands the turn to the resume worker, which calls
  the model again. The request answers ``202 running`` within the budget, whatever the call's length.
* **a stop.** While the call is in flight the worker looks at the turn record every
  :data:`STOP_POLL_SECONDS`; a ``cancel`` (or a supersede) abandons the call at once and the turn
  finishes ``cancelled`` within about a second, whatever the call's length.

An abandoned call goes on in a daemon thread until the SDK returns or, streaming, until its next
piece of text (its stream is closed then: no more tokens are read); its answer is discarded, and the
turn's audit says so (``model_call_abandoned``). A call that answers before either is the normal
path, and costs no extra store read (the first wait returns at once for a fast model).

The call streams: its text goes to a :class:`~loopengine.app.live.TextStream` (``on_text``), which
publishes each piece to this process's live bus at once; every time the worker wakes while the call is
in flight (every :data:`STOP_POLL_SECONDS`) it writes what arrived since as one durable ``text:delta``
event. Once the worker walks away the stream is closed: the client's next piece raises, ending it.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import replace

from loopengine.app.live import DELTA_FLUSH_SECONDS, TextStream
from loopengine.app.ports import ModelClient, ModelRequest, ModelResponse
from loopengine.app.worker.runner import Worker
from loopengine.domain.base.errors import StoreError
from loopengine.domain.turns import StopReason

STOP_POLL_SECONDS = DELTA_FLUSH_SECONDS
"""How often a worker in a model call looks for a stop (a cancel shows within about a second) and
writes the text streamed since it last looked."""


class Abandoned(Exception):
    """The worker walked away from a model call: ``stop`` set for a stop, else the budget ran out."""

    def __init__(self, stop: StopReason | None) -> None:
        super().__init__(stop.value if stop is not None else "time budget")
        self.stop = stop


def call_model(
    worker: Worker, client: ModelClient, request: ModelRequest, *, stream_text: bool = True
) -> ModelResponse:
    """``client.create(request)``, waited for while the budget lasts and no stop was asked.

    Raises :class:`Abandoned`; the model's own errors (``ModelError``) come through as they are.
    ``stream_text=False``: the answer's text is not the turn's (a compaction's summary), so none of
    it goes to the live bus or the turn's ``text:delta`` events.
    """
    prepare = getattr(client, "prepare", None)
    if callable(prepare):  # import the SDK here, not in the thread: imports there block this one
        prepare()
    answers: queue.Queue[tuple[ModelResponse | None, BaseException | None]] = queue.Queue(maxsize=1)
    stream = TextStream(worker.turn_id, worker.rt.stores.clock)
    streaming = replace(request, on_text=stream) if stream_text else request

    def run() -> None:
        try:
            answers.put((client.create(streaming), None))
        except BaseException as exc:  # handed to the waiting worker, never lost in the thread
            answers.put((None, exc))

    threading.Thread(target=run, name=f"model-{worker.turn_id}", daemon=True).start()
    try:
        return _wait(worker, answers, stream)
    finally:
        stream.close()


def _wait(
    worker: Worker,
    answers: queue.Queue[tuple[ModelResponse | None, BaseException | None]],
    stream: TextStream,
) -> ModelResponse:
    clock, durable = worker.rt.stores.clock, True
    while True:
        wait = STOP_POLL_SECONDS
        if worker.deadline is not None:
            wait = min(wait, max(0.0, worker.deadline - clock.now()))
        try:
            response, error = answers.get(timeout=wait)
        except queue.Empty:
            durable = durable and _flush(worker, stream)
        else:
            if error is not None:
                raise error
            assert response is not None
            return response
        if worker.deadline is not None and clock.now() >= worker.deadline:
            raise Abandoned(None)
        current = worker.rt.stores.turns.get_turn(worker.turn_id)
        if current is not None and current.stop_requested is not None:
            raise Abandoned(current.stop_requested)


def _flush(worker: Worker, stream: TextStream) -> bool:
    """Write the text streamed since the last flush as one ``text:delta`` event; False if the store failed.

    Not through ``rt.event``: a piece of text is neither counted nor logged. A store that fails here
    only ends the durable pieces of this call (the whole text still comes with ``model_response``).
    """
    piece = stream.flush()
    if piece is None:
        return True
    try:
        worker.rt.stores.turns.add_event(worker.turn_id, piece.event())
    except StoreError:
        return False
    return True
