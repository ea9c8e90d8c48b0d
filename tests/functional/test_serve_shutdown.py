"""Stopping `toolpipe serve` while a tool runs: one drain, then the rest stops at once (issue 18:
a SIGTERM took 66 s, two 30-s drains in a row)."""

import contextlib
import threading
import time

import pytest

from tests.conftest import Reply, _pipeline, call
from toolpipe.infra.local.serve_loop import serve_until_stopped
from toolpipe.infra.local.server import LocalServer

DRAIN_SECONDS = 1.0


def test_a_stop_drains_once_then_the_runtime_stops_what_is_left_at_once() -> None:
    pipelines = _pipeline()
    pipeline = next(pipelines)
    runtime = pipeline.runtime
    runtime.drain_seconds = DRAIN_SECONDS
    pipeline.script(Reply(tool_calls=[call("slow", seconds=30)]), Reply(content="done"))
    pipeline.start("sleep")
    assert runtime.workers is not None
    deadline = time.monotonic() + 30
    while runtime.workers.invocations < 1:
        assert time.monotonic() < deadline, "the call never reached a worker"
        time.sleep(0.05)

    with LocalServer(runtime, "127.0.0.1", 0, {}) as server:
        stop = threading.Event()
        stop.set()  # the signal came
        started = time.monotonic()
        serve_until_stopped(runtime, server, stop, threading.Event(), None)
        drained = time.monotonic() - started
    assert DRAIN_SECONDS <= drained < DRAIN_SECONDS + 2
    assert runtime.drain_seconds == 0  # the runtime's exit does not drain as long again

    started = time.monotonic()
    with contextlib.suppress(StopIteration):
        next(pipelines)
    stopped = time.monotonic() - started
    print(f"drain {drained:.1f} s, then the runtime stopped in {stopped:.1f} s with a tool still running")
    assert stopped < 15  # stop the execution (5 s grace at most), the pool (3 s), save


@pytest.mark.parametrize("ended_by", ["the shutdown", "a cancel just before"])
def test_an_execution_stopped_at_shutdown_gives_its_running_step_the_grace_before_the_mock_goes(
    ended_by: str,
) -> None:
    """A stop ends the execution at once, as on AWS, while its Lambda task (a step waiting on its
    model) still runs: the runtime's exit waits for that step, within the grace, before moto goes
    away under it, whether the exit stopped the execution or a cancel had."""
    asked, release = threading.Event(), threading.Event()

    def answer_when_released(request: dict[str, object]) -> Reply:
        asked.set()
        release.wait(30)
        return Reply(content="late")

    pipelines = _pipeline()
    pipeline = next(pipelines)
    try:
        pipeline.runtime.drain_seconds = 0  # stop what runs at once
        pipeline.model.responder = answer_when_released
        run_id = pipeline.start("answer slowly")
        assert asked.wait(30)
        runtime = pipeline.runtime
        assert runtime.tasks_in_progress() == 1
        if ended_by != "the shutdown":
            assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")[0] == 200
        threading.Timer(1.0, release.set).start()  # the model answers a second into the shutdown
        started = time.monotonic()
        with contextlib.suppress(StopIteration):
            next(pipelines)
        assert runtime.tasks_in_progress() == 0  # the step ended before the runtime did
        assert 0.8 < time.monotonic() - started < 10
    finally:
        release.set()
        pipelines.close()
