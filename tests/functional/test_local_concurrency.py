"""The local runtime under concurrent requests, as its workers, API and executions make them.

Thread switches are made far more frequent than Python's default so that an unguarded
race in moto shows within seconds instead of once in a CI run (where it was first seen).
"""

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from botocore.exceptions import ClientError

from toolpipe.infra.cdk.functions import TOOL_WORKER
from toolpipe.infra.local.runtime import TABLE, LocalRuntime


@pytest.fixture
def runtime() -> Iterator[LocalRuntime]:
    with LocalRuntime(workers=1) as rt:
        yield rt


@contextmanager
def _frequent_thread_switches() -> Iterator[None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _run_together(seconds: float, *loops: Callable[[], None]) -> list[BaseException]:
    """Run each loop on its own thread until `seconds` pass; return what they raised."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def repeat(loop: Callable[[], None]) -> None:
        while not stop.is_set():
            try:
                loop()
            except Exception as e:  # collected: the assertion names them
                errors.append(e)

    threads = [threading.Thread(target=repeat, args=(loop,)) for loop in loops]
    with _frequent_thread_switches():
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
    return errors


def test_reading_a_run_while_workers_write_to_it(runtime: LocalRuntime) -> None:
    db = runtime.dynamodb
    for i in range(300):
        db.put_item(TableName=TABLE, Item={"pk": {"S": "RUN#r"}, "sk": {"S": f"MSG#{i:06d}"}})
    written = iter(range(10**9))

    def write() -> None:
        db.put_item(TableName=TABLE, Item={"pk": {"S": "RUN#r"}, "sk": {"S": f"CALL#{next(written):09d}"}})

    def read() -> None:
        db.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "RUN#r"}},
            Limit=5,
        )

    errors = _run_together(3, write, read)
    assert errors == []


def test_a_conditional_put_succeeds_once_among_racing_threads(runtime: LocalRuntime) -> None:
    db = runtime.dynamodb
    racers, rounds = 4, 300
    # With a timeout: a racer that dies must fail the test, not leave the others waiting.
    start_line = threading.Barrier(racers, timeout=30)
    wins = [0] * rounds
    count = threading.Lock()
    errors: list[BaseException] = []

    def race() -> None:
        try:
            for n in range(rounds):
                start_line.wait()
                claim = {"pk": {"S": f"RUN#{n}"}, "sk": {"S": "CALL#1"}}
                try:
                    db.put_item(TableName=TABLE, Item=claim, ConditionExpression="attribute_not_exists(pk)")
                except ClientError as e:
                    # By code, as the store checks it: botocore builds a client's exception
                    # classes lazily, and racing threads can see two copies of the class.
                    if e.response["Error"]["Code"] != "ConditionalCheckFailedException":
                        raise
                    continue
                with count:
                    wins[n] += 1
        except BaseException as e:
            errors.append(e)
            start_line.abort()

    threads = [threading.Thread(target=race) for _ in range(racers)]
    with _frequent_thread_switches():
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [e for e in errors if not isinstance(e, threading.BrokenBarrierError)] == []
    assert wins == [1] * rounds


def test_a_queue_loses_and_repeats_nothing_while_workers_send_and_delete(runtime: LocalRuntime) -> None:
    sqs = runtime.sqs
    queue_url = sqs.create_queue(QueueName="concurrency", Attributes={"VisibilityTimeout": "600"})["QueueUrl"]
    sent = [str(i) for i in range(300)]
    received: list[str] = []

    def send() -> None:
        for body in sent:
            sqs.send_message(QueueUrl=queue_url, MessageBody=body)

    def waiting() -> bool:
        attributes = sqs.get_queue_attributes(
            QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"]
        )
        return attributes["Attributes"]["ApproximateNumberOfMessages"] != "0"

    def consume() -> None:
        while sender.is_alive() or waiting():
            for message in sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1).get("Messages", []):
                received.append(message["Body"])
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])

    sender = threading.Thread(target=send)
    consumers = [threading.Thread(target=consume) for _ in range(3)]
    with _frequent_thread_switches():
        sender.start()
        for t in consumers:
            t.start()
        for t in [sender, *consumers]:
            t.join()
    assert sorted(received, key=int) == sent


def test_concurrent_worker_invocations_each_report_only_their_own_failures(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local workers run the handler on several threads at once, as Lambda runs several
    execution environments: one invocation's poison message must not show up in another's
    batch response (they once shared one batch processor)."""
    from toolpipe.infra.local.lambdas import LocalContext, call_handler
    from toolpipe.shared.runs import tool_executor

    # The good messages' tokens wait for nothing: judge that at the first heartbeat, not after ~1.5 s.
    monkeypatch.setattr(tool_executor, "START_BEAT_DELAYS", (0.0,))
    from toolpipe.infra.local.workers import sqs_record

    wrong: list[str] = []

    def invoke(index: int) -> None:
        poison = index % 2 == 0
        # A good message whose task no longer waits is consumed without running anything.
        body = "{not json" if poison else '{"run_id": "gone", "seq": 3, "message_seq": 2, "task_token": "x"}'
        record = sqs_record({"MessageId": f"m-{index}", "Body": body})
        response = call_handler(
            "toolpipe.functions.tool_worker.handler.lambda_handler",
            {"Records": [record]},
            LocalContext(function_name=TOOL_WORKER.name, timeout_seconds=60),
        )
        expected = [{"itemIdentifier": f"m-{index}"}] if poison else []
        if response["batchItemFailures"] != expected:
            wrong.append(f"m-{index}: {response}")

    with _frequent_thread_switches():
        threads = [
            threading.Thread(target=lambda i=i: [invoke(i * 25 + k) for k in range(25)]) for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    assert wrong == []
