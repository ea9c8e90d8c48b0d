"""The worker pool's alarm clock (infra/local/alarm.py), and how the pool reads the requests
that set it (infra/local/workers.py)."""

import threading
import time
from types import SimpleNamespace
from typing import Any

from toolpipe.infra.local.alarm import Alarm
from toolpipe.infra.local.workers import per_message, queue_request

URL = "http://sqs.us-east-1.localhost.localstack.cloud:4566/123456789012/toolpipe-local-tools"


def _rings() -> tuple[Alarm, "list[float]", threading.Event]:
    rang: list[float] = []
    event = threading.Event()

    def ring() -> None:
        rang.append(time.monotonic())
        event.set()

    alarm = Alarm(ring, name="test-alarm")
    alarm.start()
    return alarm, rang, event


def test_it_rings_once_a_time_comes_and_not_before() -> None:
    alarm, rang, event = _rings()
    try:
        set_at = time.monotonic()
        alarm.set(0.2)
        assert event.wait(5)
        assert rang[0] - set_at >= 0.2 and len(rang) == 1
        assert alarm.pending() == 0
    finally:
        alarm.stop()


def test_an_earlier_time_set_later_rings_first() -> None:
    alarm, rang, event = _rings()
    try:
        alarm.set(60)
        set_at = time.monotonic()
        alarm.set(0.1)  # the thread was waiting for the minute: it must wait for this instead
        assert event.wait(5) and rang[0] - set_at < 5
        assert alarm.pending() == 1  # the minute is still set
    finally:
        alarm.stop()


def test_a_cancelled_or_moved_time_does_not_ring_when_it_was_due() -> None:
    alarm, rang, event = _rings()
    try:
        alarm.set(0.1, key="deleted")
        alarm.cancel("deleted")
        alarm.set(0.1, key="moved")
        alarm.set(60, key="moved")  # set again: its time is the new one
        assert not event.wait(0.5) and rang == []
        assert alarm.pending() == 1
    finally:
        alarm.stop()


def test_it_stops_at_once_with_times_still_set() -> None:
    alarm, rang, _ = _rings()
    alarm.set(3600)
    started = time.monotonic()
    alarm.stop()
    assert time.monotonic() - started < 5 and rang == []


def _request(body: bytes, headers: dict[str, Any]) -> Any:
    return SimpleNamespace(body=body, headers=headers)


def test_the_requests_that_can_show_a_message_are_read_in_both_protocols() -> None:
    json_send = _request(
        b'{"QueueUrl": "' + URL.encode() + b'", "MessageBody": "x", "DelaySeconds": 3}',
        {"X-Amz-Target": "AmazonSQS.SendMessage"},
    )
    assert queue_request(json_send, URL) == (
        "SendMessage",
        {"QueueUrl": URL, "MessageBody": "x", "DelaySeconds": 3},
    )
    # The same queue by name, however the endpoint is spelled; another queue is not this one's.
    assert queue_request(json_send, "http://localhost:5000/123456789012/toolpipe-local-tools") is not None
    assert queue_request(json_send, URL + "-other") is None

    form = (
        "Action=SendMessageBatch&QueueUrl=" + URL + "&SendMessageBatchRequestEntry.1.Id=a"
        "&SendMessageBatchRequestEntry.1.MessageBody=x&SendMessageBatchRequestEntry.2.Id=b"
        "&SendMessageBatchRequestEntry.2.MessageBody=y&SendMessageBatchRequestEntry.2.DelaySeconds=4"
    )
    found = queue_request(_request(form.encode(), {"Content-Type": "application/x-www-form-urlencoded"}), URL)
    assert found is not None and found[0] == "SendMessageBatch"
    assert per_message(found[1], "DelaySeconds", 0.0) == [0.0, 4.0]

    # Neither a receive, nor another service's request of the same name, nor a body not a form.
    assert (
        queue_request(
            _request(b'{"QueueUrl": "' + URL.encode() + b'"}', {"X-Amz-Target": "AmazonSQS.ReceiveMessage"}),
            URL,
        )
        is None
    )
    assert queue_request(_request(b"{}", {"X-Amz-Target": "Other.SendMessage"}), URL) is None
    assert (
        queue_request(
            _request(b"Action=SendMessage&QueueUrl=" + URL.encode(), {"Content-Type": "text/plain"}), URL
        )
        is None
    )
    assert queue_request(_request(b"\xff{", {"X-Amz-Target": "AmazonSQS.SendMessage"}), URL) is None


def test_each_message_of_a_request_has_its_value_or_the_default() -> None:
    assert per_message({"DelaySeconds": 2}, "DelaySeconds", 0.0) == [2.0]
    assert per_message({}, "DelaySeconds", 5.0) == [5.0]
    entries = {
        "Entries": [{"Id": "a"}, {"Id": "b", "VisibilityTimeout": 7}, {"Id": "c", "VisibilityTimeout": "x"}]
    }
    assert per_message(entries, "VisibilityTimeout", 0.0) == [0.0, 7.0, 0.0]


def test_a_time_too_far_ahead_is_cut_to_the_longest_and_the_alarm_keeps_ringing() -> None:
    """A request SQS refuses (`DelaySeconds=10**10`) still reaches the pool: its time once
    overflowed the thread's wait and ended the alarm for good."""
    alarm, _, event = _rings()
    try:
        alarm.set(1e10)
        alarm.set(float("nan"))  # no time at all: at once
        assert event.wait(5)
        event.clear()
        alarm.set(0.05)
        assert event.wait(5)
    finally:
        alarm.stop()


def test_a_ring_that_fails_leaves_the_alarm_ringing() -> None:
    rang = threading.Event()
    calls: list[int] = []

    def ring() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the first ring fails")
        rang.set()

    alarm = Alarm(ring, name="test-alarm")
    alarm.start()
    try:
        alarm.set(0.01)
        time.sleep(0.2)
        alarm.set(0.01)
        assert rang.wait(5) and len(calls) == 2
    finally:
        alarm.stop()


def test_a_period_rings_again_and_again() -> None:
    rang: list[float] = []
    alarm = Alarm(lambda: rang.append(time.monotonic()), name="test-alarm", period=0.05)
    alarm.start()
    try:
        deadline = time.monotonic() + 10
        while len(rang) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        alarm.stop()


def test_cancelled_times_do_not_pile_up() -> None:
    """Each message taken sets a time for its visibility timeout (12 minutes in the stack) and
    cancels it when deleted: the cancelled ones, and their receipt handles, are let go."""
    alarm, _, _ = _rings()
    try:
        for n in range(10_000):
            alarm.set(720, key=f"receipt-{n}")
            alarm.cancel(f"receipt-{n}")
        alarm.set(720, key="in flight")
        assert alarm.pending() == 1
        assert len(alarm._times) < 200
    finally:
        alarm.stop()


def test_a_request_names_at_most_a_batch_of_messages() -> None:
    """SQS refuses a batch of more than ten, but the pool hears the request all the same."""
    entries = {"Entries": [{"Id": str(n), "DelaySeconds": 0} for n in range(100_000)]}
    assert per_message(entries, "DelaySeconds", 0.0) == [0.0] * 10


def test_a_put_events_wakes_the_trigger_workers_once_per_run_request_at_most_ten() -> None:
    from toolpipe.infra.local.triggers import run_requests

    target = {"X-Amz-Target": "AWSEvents.PutEvents"}
    three = b'{"Entries": [' + b",".join([b'{"DetailType": "RunRequested"}'] * 3) + b"]}"
    assert run_requests(_request(three, target)) == 3
    assert run_requests(_request(b'{"Entries": [{"DetailType": "RunEnded"}]}', target)) == 0
    assert run_requests(_request(b"RunRequested " * 10_000, target)) == 10
    assert run_requests(_request(three, {"X-Amz-Target": "AmazonSQS.SendMessage"})) == 0
