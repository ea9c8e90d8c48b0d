"""Stopping `toolpipe serve` while a tool runs: one drain, then the rest stops at once (issue 18:
a SIGTERM took 66 s, two 30-s drains in a row)."""

import contextlib
import threading
import time

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
