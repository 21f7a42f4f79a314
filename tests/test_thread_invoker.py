"""The local async invoke (``loopengine dev``'s ThreadInvoker) runs at most N resumes at once, drops none."""

from __future__ import annotations

import threading
import time

import pytest

from loopengine.app.invokers import ThreadInvoker


def test_a_burst_of_invokes_runs_at_most_n_at_once_and_every_one_runs() -> None:
    running, peak, ran = 0, 0, []
    lock, gate = threading.Lock(), threading.Event()

    def resume(turn_id: str) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        gate.wait(5)
        with lock:
            running -= 1
            ran.append(turn_id)

    invoker = ThreadInvoker(resume, max_running=4)
    for n in range(30):  # a sweep that found 30 due turns
        invoker.invoke(f"trn_{n}")
    time.sleep(0.2)
    assert invoker.running == 4  # the rest wait in the queue, no thread each
    assert threading.active_count() < 30
    gate.set()
    invoker.join(10)
    assert peak == 4
    assert sorted(ran) == sorted(f"trn_{n}" for n in range(30))


def test_a_turn_already_waiting_is_not_queued_twice() -> None:
    gate, ran = threading.Event(), []

    def run(t: str) -> None:
        gate.wait(5)
        ran.append(t)

    invoker = ThreadInvoker(run, max_running=1)
    invoker.invoke("trn_busy")  # takes the one worker
    time.sleep(0.1)
    for _ in range(5):
        invoker.invoke("trn_again")  # the sweep and a resolve both hand it on
    gate.set()
    invoker.join(5)
    assert ran == ["trn_busy", "trn_again"]


def test_a_failing_resume_is_logged_and_the_worker_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[str] = []

    def resume(turn_id: str) -> None:
        if turn_id == "trn_bad":
            raise RuntimeError("boom")
        ran.append(turn_id)

    invoker = ThreadInvoker(resume, max_running=1)
    invoker.invoke("trn_bad")
    invoker.invoke("trn_good")
    invoker.join(5)
    assert ran == ["trn_good"]
    assert any("trn_bad" in r.getMessage() for r in caplog.records)


def test_no_workers_is_refused() -> None:
    with pytest.raises(ValueError):
        ThreadInvoker(lambda t: None, max_running=0)
