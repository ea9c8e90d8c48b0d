"""A pool of local tool workers consuming the tool queue, as Lambda's SQS poller would.

Each worker takes one message at a time (batch size 1), passes it to the real handler as
an SQS event, deletes it on success and leaves it for redelivery after the visibility
timeout when the handler reports it in `batchItemFailures` or raises.
"""

import logging
import threading
from typing import TYPE_CHECKING, Any

from infra.local.lambdas import LocalContext, call_handler

if TYPE_CHECKING:
    from mypy_boto3_sqs.client import SQSClient

WORKER_HANDLER = "functions.tool_worker.handler.lambda_handler"
POLL_INTERVAL_SECONDS = 0.02


def sqs_record(
    message: dict[str, Any], queue_arn: str = "arn:aws:sqs:us-east-1:123456789012:tools"
) -> dict[str, Any]:
    """One record of the event Lambda's SQS poller sends, from a `ReceiveMessage` message."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message.get("ReceiptHandle", "r"),
        "body": message["Body"],
        "attributes": message.get("Attributes", {"ApproximateReceiveCount": "1"}),
        "messageAttributes": {},
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": "us-east-1",
    }


class WorkerPool:
    def __init__(
        self, sqs: "SQSClient", queue_url: str, queue_arn: str, size: int, timeout_seconds: int
    ) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._queue_arn = queue_arn
        self._timeout = timeout_seconds
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, name=f"tool-worker-{i}", daemon=True) for i in range(size)
        ]
        self.invocations = 0
        self._count_lock = threading.Lock()

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                # Short polls: a long poll waits inside moto's request, which holds the lock that
                # every other local request needs (infra/local/serial.py).
                received = self._sqs.receive_message(
                    QueueUrl=self._queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=0, AttributeNames=["All"]
                )
                messages = received.get("Messages", [])
                for message in messages:
                    self._handle(message)
            except Exception:
                if self._stop.is_set():
                    return  # the runtime shut down under a running invocation: its queue is gone
                # As Lambda's poller: a failed receive or delete is tried again, never the end of it.
                logging.getLogger(__name__).exception("tool worker poll failed")
                messages = []
            if not messages:
                self._stop.wait(POLL_INTERVAL_SECONDS)

    def _handle(self, message: dict[str, Any]) -> None:
        event = {"Records": [sqs_record(message, self._queue_arn)]}
        with self._count_lock:
            self.invocations += 1
        try:
            response = call_handler(
                WORKER_HANDLER,
                event,
                LocalContext(function_name="tool-worker", timeout_seconds=self._timeout),
            )
        except Exception:
            # As on Lambda: the message comes back after the visibility timeout. Said aloud, since
            # locally there is no CloudWatch to find it in.
            logging.getLogger(__name__).exception("tool worker invocation failed")
            return
        if not response.get("batchItemFailures"):
            self._sqs.delete_message(QueueUrl=self._queue_url, ReceiptHandle=message["ReceiptHandle"])
