"""The local worker pool: woken by sends, idle without burning CPU, as wide as the Map."""

import contextlib
import gc
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from toolpipe.infra.cdk.definition import MAX_PARALLEL_CALLS
from toolpipe.infra.local import serial
from toolpipe.infra.local.runtime import LocalRuntime
from toolpipe.infra.local.workers import WorkerPool

HANDLER = f"{__name__}.record_handler"
_bodies: "queue.Queue[str]" = queue.Queue()
_fail_first: set[str] = set()
_exit_first: set[str] = set()
_barrier: threading.Barrier | None = None


def record_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """A worker handler for these tests: records each body; can fail a first delivery or
    wait at a barrier until every worker holds a message."""
    body = event["Records"][0]["body"]
    if body in _exit_first:
        _exit_first.discard(body)
        raise SystemExit(2)  # what no handler should let out; a worker must outlive it all the same
    if body in _fail_first:
        _fail_first.discard(body)
        raise RuntimeError("first delivery fails")
    if _barrier is not None:
        _barrier.wait(timeout=10)
    _bodies.put(body)
    return {"batchItemFailures": []}


@pytest.fixture
def sqs_queue() -> Iterator[tuple[Any, str, str]]:
    with mock_aws():
        undo = serial.install()
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="workers-test", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        while not _bodies.empty():
            _bodies.get_nowait()
        try:
            yield sqs, url, arn
        finally:
            undo()


@contextlib.contextmanager
def _serving(pool: WorkerPool) -> Iterator[WorkerPool]:
    """The pool started, every worker of it asleep; stopped after."""
    pool.start()
    try:
        _await_idle(pool)
        yield pool
    finally:
        pool.stop()


def _unpolled(sqs_queue: tuple[Any, str, str], size: int = 2) -> WorkerPool:
    """A pool whose safety poll is a minute away: within a test, only a send or its alarm makes it
    receive."""
    sqs, url, arn = sqs_queue
    return WorkerPool(sqs, url, arn, size=size, timeout_seconds=5, safety_poll_seconds=60, handler=HANDLER)


def _await_idle(pool: WorkerPool) -> None:
    # No event marks "every worker asleep": a bounded look at the pool's own count.
    deadline = time.monotonic() + 5
    while pool.idle_workers < pool.size:
        assert time.monotonic() < deadline, "workers never went idle"
        time.sleep(0.005)


def test_a_send_wakes_an_idle_worker_long_before_its_safety_poll(sqs_queue: tuple[Any, str, str]) -> None:
    sqs, url, _ = sqs_queue
    pool = _unpolled(sqs_queue)
    pool.start()
    try:
        _await_idle(pool)
        started = time.monotonic()
        sqs.send_message(QueueUrl=url, MessageBody="wake up")
        assert _bodies.get(timeout=5) == "wake up"
        # Without the wake-up, the first safety poll is >= 60 s away (a loaded machine is slow:
        # the bound only has to tell the two apart).
        assert time.monotonic() - started < 20
    finally:
        pool.stop()


def test_what_waits_before_the_pool_starts_is_received_one_receive_a_message(
    sqs_queue: tuple[Any, str, str],
) -> None:
    """Messages sent before the pool started (a state folder's queue) are each received, by one
    receive each: no worker receives just because it started (that was 11 empty receives a
    runtime), and an empty queue costs no receive at all."""
    sqs, url, _ = sqs_queue
    # Long enough that no message shows again while it is handled, on a loaded machine too.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "30"})
    waiting = {f"waited {i}" for i in range(7)}
    for body in sorted(waiting):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    # More messages than workers: each is taken at once, none left to the safety poll a minute away.
    pool = _unpolled(sqs_queue, size=2)
    pool.start()
    try:
        assert {_bodies.get(timeout=10) for _ in waiting} == waiting
        _await_idle(pool)
        assert pool.receives == len(waiting)
    finally:
        pool.stop()
    empty = _unpolled(sqs_queue, size=5)
    with _serving(empty):
        assert empty.receives == 0


def test_a_send_to_another_queue_wakes_no_worker(sqs_queue: tuple[Any, str, str]) -> None:
    sqs, url, _ = sqs_queue
    other = sqs.create_queue(QueueName="workers-test-other")["QueueUrl"]
    pool = _unpolled(sqs_queue)
    pool.start()
    try:
        _await_idle(pool)
        before = pool.receives
        sqs.send_message(QueueUrl=other, MessageBody="not for the pool")
        sqs.send_message(QueueUrl=url, MessageBody="for the pool")  # a marker: the pool's own send
        assert _bodies.get(timeout=5) == "for the pool"
        assert pool.receives - before <= 2  # the marker's wake-up and the receive after it
    finally:
        pool.stop()


def test_a_message_visible_again_after_its_timeout_is_received_when_it_shows(
    sqs_queue: tuple[Any, str, str],
) -> None:
    sqs, url, _ = sqs_queue
    _fail_first.add("retry me")
    with _serving(_unpolled(sqs_queue)):
        sent = time.monotonic()
        sqs.send_message(QueueUrl=url, MessageBody="retry me")
        # No request announces the redelivery (visibility timeout 1 s), and the safety poll is a
        # minute away: the pool's alarm, set when it took the message, receives it as it shows.
        assert _bodies.get(timeout=10) == "retry me"
        assert "retry me" not in _fail_first  # the first delivery did fail
        assert 1.0 <= time.monotonic() - sent < 10


def test_what_no_request_announces_is_received_by_the_safety_poll(sqs_queue: tuple[Any, str, str]) -> None:
    """A message put in the queue inside moto (no request, so nothing announced and no alarm):
    the slow safety poll is what finds it."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import sqs_backends

    sqs, url, arn = sqs_queue
    with _serving(
        WorkerPool(sqs, url, arn, size=10, timeout_seconds=5, safety_poll_seconds=1, handler=HANDLER)
    ):
        put = time.monotonic()
        sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].send_message("workers-test", "unannounced")
        assert _bodies.get(timeout=10) == "unannounced"
        # Within the pool's period, whatever its size (each of its workers once waited the period
        # times the pool's size: the first of ten woke after ~3 periods).
        assert time.monotonic() - put < 2.5


def test_a_listener_that_fails_does_not_fail_the_request_it_heard(sqs_queue: tuple[Any, str, str]) -> None:
    """Listeners hear a request after moto applied it: an error there once reached the caller,
    who sent again (through the AWS endpoint, a batch handled three times)."""
    sqs, url, _ = sqs_queue
    heard: list[Any] = []

    def failing(request: Any) -> None:
        raise OverflowError("a listener's bug")

    serial.add_listener(failing)
    serial.add_listener(heard.append)
    try:
        sqs.send_message(QueueUrl=url, MessageBody="once")
    finally:
        serial.remove_listener(failing)
        serial.remove_listener(heard.append)
    assert (
        heard
        and sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])[
            "Attributes"
        ]["ApproximateNumberOfMessages"]
        == "1"
    )


def test_an_idle_pool_makes_no_receive_for_seconds(sqs_queue: tuple[Any, str, str]) -> None:
    """Idle, with nothing in flight, a pool receives only at its safety poll (one per pool every
    5 s): before the alarm it polled twice a second, most of an idle runtime's CPU."""
    sqs, url, arn = sqs_queue
    with _serving(WorkerPool(sqs, url, arn, size=2, timeout_seconds=5, handler=HANDLER)) as pool:
        before = pool.receives
        threading.Event().wait(1.5)
        assert pool.receives == before


def test_a_delayed_send_is_received_when_its_delay_ends(sqs_queue: tuple[Any, str, str]) -> None:
    sqs, url, _ = sqs_queue
    with _serving(_unpolled(sqs_queue)):
        sent = time.monotonic()
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": "now", "MessageBody": "at once"},
                {"Id": "later", "MessageBody": "after a second", "DelaySeconds": 1},
            ],
        )
        assert _bodies.get(timeout=5) == "at once"
        # The send woke a worker, which found only the first: the second shows a second later,
        # with no request to announce it.
        assert _bodies.get(timeout=10) == "after a second"
        assert 1.0 <= time.monotonic() - sent < 10


def test_a_message_whose_visibility_is_changed_is_received_when_it_shows(
    sqs_queue: tuple[Any, str, str],
) -> None:
    sqs, url, _ = sqs_queue
    sqs.send_message(QueueUrl=url, MessageBody="held")
    [held] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)["Messages"]
    with _serving(_unpolled(sqs_queue)):
        changed = time.monotonic()
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=held["ReceiptHandle"], VisibilityTimeout=1)
        assert _bodies.get(timeout=10) == "held"
        assert 1.0 <= time.monotonic() - changed < 10


def test_a_visibility_timeout_set_on_the_queue_is_the_one_the_pool_waits(
    sqs_queue: tuple[Any, str, str],
) -> None:
    sqs, url, _ = sqs_queue
    with _serving(_unpolled(sqs_queue, size=1)):  # it reads the queue's 1 s
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "3"})
        _fail_first.add("later")
        sent = time.monotonic()
        sqs.send_message(QueueUrl=url, MessageBody="later")
        # Rung after 1 s, the pool would find nothing and wait for its safety poll, a minute away.
        assert _bodies.get(timeout=15) == "later"
        assert 3.0 <= time.monotonic() - sent < 15


@pytest.mark.parametrize("size", [1, 10])
def test_a_burst_is_handled_at_once_message_by_message(sqs_queue: tuple[Any, str, str], size: int) -> None:
    """A batch of five, then twenty sends in a row, then a delayed batch of five: each message
    one receive, whatever the pool's size. Woken once per request, or a wake-up lost to a
    worker told to wake but not yet running, the rest waited for the safety poll (a minute here),
    one message a poll."""
    sqs, url, _ = sqs_queue
    with _serving(_unpolled(sqs_queue, size=size)):
        started = time.monotonic()
        sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": f"b{i}", "MessageBody": f"batch {i}"} for i in range(5)]
        )
        for i in range(20):
            sqs.send_message(QueueUrl=url, MessageBody=f"row {i}")
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": f"d{i}", "MessageBody": f"delayed {i}", "DelaySeconds": 1} for i in range(5)],
        )
        got = {_bodies.get(timeout=15) for _ in range(30)}
        assert got == {f"batch {i}" for i in range(5)} | {f"row {i}" for i in range(20)} | {
            f"delayed {i}" for i in range(5)
        }
        assert time.monotonic() - started < 15


def test_a_worker_outlives_an_invocation_that_raises_system_exit(sqs_queue: tuple[Any, str, str]) -> None:
    sqs, url, arn = sqs_queue
    bodies = [f"exit {i}" for i in range(11)]
    _exit_first.update(bodies)
    pool = WorkerPool(sqs, url, arn, size=1, timeout_seconds=5, safety_poll_seconds=0.1, handler=HANDLER)
    pool.start()
    try:
        for body in bodies:
            sqs.send_message(QueueUrl=url, MessageBody=body)
        # Each first delivery exits; its redelivery (after the 1-s visibility timeout) is handled
        # by the same, single worker.
        handled = sorted(_bodies.get(timeout=30) for _ in bodies)
        assert handled == sorted(bodies) and not _exit_first
        assert all(t.is_alive() for t in pool._threads)
    finally:
        pool.stop()


def test_stopping_a_pool_waits_a_bounded_time_for_a_hung_invocation(sqs_queue: tuple[Any, str, str]) -> None:
    global _barrier
    sqs, url, arn = sqs_queue
    _barrier = threading.Barrier(2)  # the handler waits here: nobody else ever arrives
    pool = WorkerPool(sqs, url, arn, size=3, timeout_seconds=5, handler=HANDLER)
    pool.start()
    try:
        sqs.send_message(QueueUrl=url, MessageBody="hangs")
        deadline = time.monotonic() + 5
        while pool.invocations < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = time.monotonic()
        pool.stop(timeout=0.5)
        assert time.monotonic() - started < 10  # the invocation never ends by itself
    finally:
        _barrier.abort()
        _barrier = None


def test_as_many_workers_run_at_once_as_the_map_runs_branches(sqs_queue: tuple[Any, str, str]) -> None:
    global _barrier
    sqs, url, arn = sqs_queue
    _barrier = threading.Barrier(MAX_PARALLEL_CALLS)
    pool = WorkerPool(sqs, url, arn, size=MAX_PARALLEL_CALLS, timeout_seconds=5, handler=HANDLER)
    pool.start()
    try:
        for i in range(MAX_PARALLEL_CALLS):
            sqs.send_message(QueueUrl=url, MessageBody=f"call {i}")
        # Each handler waits at the barrier: it breaks (and nothing is recorded) unless every
        # message is held by its own worker at the same time.
        got = {_bodies.get(timeout=10) for _ in range(MAX_PARALLEL_CALLS)}
        assert got == {f"call {i}" for i in range(MAX_PARALLEL_CALLS)}
    finally:
        _barrier = None
        pool.stop()


def test_an_idle_runtime_uses_under_two_percent_of_a_core() -> None:
    with LocalRuntime() as runtime:
        assert runtime.workers is not None and runtime.workers.size == MAX_PARALLEL_CALLS
        _await_idle(runtime.workers)
        cpu, wall = time.process_time(), time.monotonic()
        threading.Event().wait(2.0)  # the measurement itself: two seconds of doing nothing
        used = (time.process_time() - cpu) / (time.monotonic() - wall)
    assert used < 0.02, f"idle runtime used {used:.1%} of a core"


def test_a_runtime_starts_with_the_collector_paused_and_leaves_it_as_it_was() -> None:
    """Start-up keeps nearly all it allocates: a collection during it walks the heap for nothing
    (three full passes, ~70 ms of a first start's ~320). None runs now; it is back on after."""
    passes: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    assert gc.isenabled()
    gc.callbacks.append(count)
    try:
        runtime = LocalRuntime().__enter__()
        started = list(passes)
    finally:
        gc.callbacks.remove(count)
    try:
        assert started == []  # with the collector on, a start allocates enough for several
        assert gc.isenabled()
    finally:
        runtime.__exit__(None, None, None)


def test_a_runtime_keeps_what_it_started_with_out_of_full_collections_until_it_ends() -> None:
    """A full collection walked everything start-up made (moto, botocore, the handlers): frozen,
    it walks only what came after. Given back at the end, so a process that starts runtimes
    one after another (the tests) can still collect each one's leftovers."""
    assert gc.get_freeze_count() == 0
    with LocalRuntime():
        assert gc.get_freeze_count() > 10_000
    assert gc.get_freeze_count() == 0
