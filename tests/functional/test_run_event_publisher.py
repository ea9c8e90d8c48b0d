"""The run event publisher is best-effort and bounded: EventBridge refusing, unreachable or
silent never raises into a run, and costs it a few seconds at worst."""

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from toolpipe.shared.aws_clients import AwsClients
from toolpipe.shared.messages import RunRecord, RunStatus
from toolpipe.shared.runs.events import CLIENT_CONFIG, NO_EVENTS, EventPublisher
from toolpipe.shared.runs.factory import build_events
from toolpipe.shared.settings import EventSettings

RUN = RunRecord(run_id="r1", agent="tester", status=RunStatus.RUNNING)


@pytest.fixture
def bus() -> Iterator[tuple[EventPublisher, str]]:
    """A publisher on a moto bus, and a queue that a rule on the bus feeds."""
    with mock_aws():
        events = boto3.client("events", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        events.create_event_bus(Name="b")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="all", EventBusName="b", EventPattern=json.dumps({"source": ["toolpipe"]}))
        events.put_targets(Rule="all", EventBusName="b", Targets=[{"Id": "q", "Arn": arn}])
        yield EventPublisher(events, "b"), url


def _received(url: str) -> list[str]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    bodies: list[str] = []
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        bodies += [json.loads(m["Body"])["detail-type"] for m in messages]
        for m in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return bodies


def test_without_a_bus_name_nothing_is_published_and_no_client_is_made() -> None:
    assert build_events(EventSettings.from_env({}), aws=AwsClients()) is NO_EVENTS
    assert not NO_EVENTS.enabled
    NO_EVENTS.run_started(RUN)  # does nothing, raises nothing


def test_deferred_events_go_out_when_the_block_ends_in_batches_of_ten(
    bus: tuple[EventPublisher, str],
) -> None:
    publisher, url = bus
    with publisher.deferred():
        for _ in range(12):
            publisher.run_started(RUN)
        assert _received(url) == []  # held until the invocation's work is done
    assert _received(url) == ["RunStarted"] * 12


def test_deferred_events_go_out_even_when_the_block_raises(bus: tuple[EventPublisher, str]) -> None:
    publisher, url = bus
    with pytest.raises(RuntimeError), publisher.deferred():
        publisher.run_started(RUN)
        raise RuntimeError("answering the task failed")
    assert _received(url) == ["RunStarted"]


def test_a_refused_publish_is_logged_not_raised(
    bus: tuple[EventPublisher, str], caplog: pytest.LogCaptureFixture
) -> None:
    publisher, _ = bus
    gone = EventPublisher(boto3.client("events", region_name="us-east-1"), "no-such-bus")
    with caplog.at_level(logging.WARNING, logger="toolpipe.shared.runs.events"):
        gone.run_started(RUN)
        publisher.publish(lambda: (_ for _ in ()).throw(RuntimeError("the record could not be read")))
    assert [r.getMessage() for r in caplog.records] == [
        "run events not published",
        "a run event could not be built; not published",
    ]


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A TCP server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_silent_eventbridge_costs_a_bounded_time(
    silent_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = boto3.client(
        "events", region_name="us-east-1", endpoint_url=silent_endpoint, config=CLIENT_CONFIG
    )
    publisher = EventPublisher(client, "b")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="toolpipe.shared.runs.events"):
        publisher.run_started(RUN)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 4.0, elapsed  # two attempts of a 1 s read timeout, and a short backoff
    assert [r.getMessage() for r in caplog.records] == ["run events not published"]


def test_an_unreachable_eventbridge_is_not_waited_on() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused
    client = boto3.client("events", region_name="us-east-1", endpoint_url=closed, config=CLIENT_CONFIG)
    started = time.monotonic()
    EventPublisher(client, "b").run_started(RUN)
    # Two attempts, at most ~1 s apart; botocore's default (5, backing off) takes far longer.
    assert time.monotonic() - started < 4
