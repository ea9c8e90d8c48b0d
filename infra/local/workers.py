"""A pool of local tool workers consuming the tool queue, as Lambda's SQS poller would.

Each worker takes one message at a time (batch size 1), passes it to the real handler as
an SQS event, deletes it on success and leaves it for redelivery after the visibility
timeout when the handler reports it in `batchItemFailures` or raises.

Idle workers sleep until a message may be there to take, and receive nothing otherwise:
- a send to the queue: every request moto serves is announced by `infra/local/serial.py`, and
  each message a `SendMessage` or `SendMessageBatch` sends is one wake-up: one receive, by an
  idle worker or by a busy one once it is done (no empty receive after each message). Wake-ups
  are counted, so none is lost to a worker woken but not yet running;
- a message shown again without a request (`infra/local/alarm.py` rings then): one received and
  not deleted when its visibility timeout runs out, a delayed send when its delay ends, one whose
  visibility a request changed when that timeout runs out;
- a slow safety poll (the alarm also rings every `SAFETY_POLL_SECONDS`: one receive per pool)
  for anything neither announces: a message another consumer received and left, one put in
  inside moto.
An idle runtime polled its queues twice a second before the alarm: ~6 ms of CPU a second, most of
what it used.
"""

import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from toolpipe.infra.cdk.functions import TOOL_WORKER
from toolpipe.infra.local import serial
from toolpipe.infra.local.alarm import Alarm
from toolpipe.infra.local.lambdas import LocalContext, call_handler

if TYPE_CHECKING:
    from mypy_boto3_sqs.client import SQSClient

# How often the pool as a whole polls an idle queue, for what neither a send nor the alarm
# announces. Each receive costs ~1.5 ms of moto's request path.
SAFETY_POLL_SECONDS = 5.0
# How long stopping the pool waits for the invocations under way, all workers together.
STOP_SECONDS = 3.0
# moto stamps when a message shows again from its clock, read after the pool's: the alarm rings
# this much later, so the receive it starts finds the message.
ALARM_MARGIN_SECONDS = 0.05
# The requests that can show a message of a queue (JSON protocol, as boto3 sends them; or the
# query protocol's `Action`, as older SDKs do).
_SQS_TARGET = "AmazonSQS."
_SENDS = ("SendMessage", "SendMessageBatch")
_VISIBILITY_CHANGES = ("ChangeMessageVisibility", "ChangeMessageVisibilityBatch")
_ANNOUNCING = (*_SENDS, *_VISIBILITY_CHANGES, "SetQueueAttributes")
_FORM = "application/x-www-form-urlencoded"
# The most messages one request names: SQS's batch limit, and EventBridge's for `PutEvents`.
BATCH_MAX = 10
# At most this many receives for what waits as a pool starts (moto counts exactly, but a count is
# a count): more is left to the wake-ups of later sends and to the safety poll.
MAX_START_WAKES = 100_000


def sqs_record(
    message: Mapping[str, Any], queue_arn: str = "arn:aws:sqs:us-east-1:123456789012:tools"
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


def queue_request(request: Any, queue_url: str) -> tuple[str, dict[str, Any]] | None:
    """The action and parameters of a request moto served on the queue at `queue_url`, if it is
    one that can show a message of it (a send, a visibility change, new queue settings)."""
    headers = request.headers
    target = headers.get("X-Amz-Target") or ""
    if isinstance(target, bytes):
        target = target.decode("latin-1")
    body = request.body or b""
    try:
        if target:
            action = target[len(_SQS_TARGET) :] if target.startswith(_SQS_TARGET) else ""
            if action not in _ANNOUNCING:
                return None
            params = json.loads(body)
        else:
            # Only a form's body is read: any other (an S3 upload) may be large.
            if not str(headers.get("Content-Type") or "").startswith(_FORM):
                return None
            form = parse_qs(body.decode() if isinstance(body, bytes) else body)
            action = form.get("Action", [""])[0]
            if action not in _ANNOUNCING:
                return None
            params = {name: values[0] for name, values in form.items()}
    except Exception:  # any body moto was given: not one that can show a message here
        return None
    url = params.get("QueueUrl", "") if isinstance(params, dict) else ""
    # By name: the interpreter's clients and ours may spell the endpoint differently.
    if not isinstance(url, str) or url.rsplit("/", 1)[-1] != queue_url.rsplit("/", 1)[-1]:
        return None
    return action, params


def per_message(params: Mapping[str, Any], name: str, default: float) -> list[float]:
    """The value of `name` for each message a request names (`default` where it has none): a
    single message's, each batch entry's (JSON `Entries`), or each flattened entry's of the
    query protocol (`SendMessageBatchRequestEntry.1.Id`, `...1.DelaySeconds`)."""
    entries = params.get("Entries")
    if isinstance(entries, list):
        found = [entry.get(name, default) if isinstance(entry, dict) else default for entry in entries]
    else:
        prefixes = [key[: -len("Id")] for key in params if key.endswith(".Id")]
        found = [params.get(prefix + name, default) for prefix in prefixes] or [params.get(name, default)]
    # SQS refuses a batch of more (moto too), but the request is heard all the same: a hostile
    # one of 100,000 entries must not become as many receives.
    return [_number(value, default) for value in found[:BATCH_MAX]]


def _number(value: Any, default: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # an int too large for a float too
        return default
    return number if number == number else default  # NaN: not a number either


def _attributes(params: Mapping[str, Any]) -> dict[str, Any]:
    """A `SetQueueAttributes` request's attributes: JSON's `Attributes`, or the query protocol's
    `Attribute.1.Name` and `Attribute.1.Value`."""
    attributes = params.get("Attributes")
    if isinstance(attributes, dict):
        return attributes
    return {
        name: params.get(key[: -len("Name")] + "Value")
        for key, name in params.items()
        if key.startswith("Attribute.") and key.endswith(".Name")
    }


class WorkerPool:
    """`size` workers, each running one invocation at a time, woken by sends to the queue."""

    def __init__(
        self,
        sqs: "SQSClient",
        queue_url: str,
        queue_arn: str,
        size: int,
        timeout_seconds: int,
        safety_poll_seconds: float = SAFETY_POLL_SECONDS,
        handler: str = TOOL_WORKER.handler,
    ) -> None:
        self._sqs = sqs
        self._handler = handler
        self._queue_url = queue_url
        self._queue_arn = queue_arn
        self._timeout = timeout_seconds
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._serve, name=f"tool-worker-{i}", daemon=True) for i in range(size)
        ]
        self.invocations = 0
        self.receives = 0  # ReceiveMessage calls made, for tests and the benchmark
        self._count_lock = threading.Lock()
        # Wake-ups not taken yet: each is one receive, by a worker asleep now or by one that is
        # done with its message. Counted, so that none is lost to a worker woken but not yet
        # running, and a batch of five is five receives, not one.
        self._wake = threading.Condition()
        self._wakes = 0
        self.idle_workers = 0  # workers asleep until a send or the alarm
        # Rings when a message shows again with no request to announce it: read from the queue
        # at start, then kept from the requests that change them.
        # Its period is the pool's safety poll: one receive per pool every `safety_poll_seconds`.
        self.alarm = Alarm(
            self.wake, name=f"queue-alarm-{queue_url.rsplit('/', 1)[-1]}", period=safety_poll_seconds
        )
        self._visibility = 30.0
        self._delay = 0.0

    @property
    def size(self) -> int:
        return len(self._threads)

    def start(self) -> None:
        # Heard before the read below: a send after it is announced, one before it is counted,
        # one between the two is both (one receive more, none lost).
        serial.add_listener(self._on_request)
        try:
            settings = self._sqs.get_queue_attributes(
                QueueUrl=self._queue_url,
                AttributeNames=["VisibilityTimeout", "DelaySeconds", "ApproximateNumberOfMessages"],
            )["Attributes"]
            self._settings(settings)
            waiting = _number(settings.get("ApproximateNumberOfMessages"), 0.0)
            self.alarm.start()
            for t in self._threads:
                t.start()
        except BaseException:
            serial.remove_listener(self._on_request)  # a pool that did not start hears nothing
            raise
        # What was sent before the pool started (a state folder's queue, a message sent before a
        # restart): one receive for each message waiting. Each worker once received as it started,
        # 11 empty receives a runtime (~20 ms of its start).
        self.wake(int(min(waiting, MAX_START_WAKES)))

    def _settings(self, attributes: Mapping[Any, Any]) -> None:
        # A value moto refused (not a number) changed nothing: the old one stays.
        self._visibility = _number(attributes.get("VisibilityTimeout"), self._visibility)
        self._delay = _number(attributes.get("DelaySeconds"), self._delay)

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Stop taking messages; wait `timeout` in all for the invocations under way. One still
        running then (a tool that hangs) is left to its daemon thread, as Lambda's would be to a
        killed sandbox: its message comes back after its visibility timeout."""
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        serial.remove_listener(self._on_request)
        self.alarm.stop()

    def _on_request(self, request: Any) -> None:
        found = queue_request(request, self._queue_url)
        if found is None:
            return
        action, params = found
        if action == "SetQueueAttributes":
            self._settings(_attributes(params))
            return
        if action in _SENDS:
            later = per_message(params, "DelaySeconds", self._delay)
        else:  # a visibility change: its message shows when the new timeout runs out
            later = per_message(params, "VisibilityTimeout", 0.0)
        self.wake(sum(1 for seconds in later if seconds <= 0))
        for seconds in later:
            if seconds > 0:
                self.alarm.set(seconds + ALARM_MARGIN_SECONDS)

    def wake(self, messages: int = 1) -> None:
        """`messages` may be waiting: as many receives follow, by idle workers now or by busy
        ones once they are done. Also for messages no `SendMessage` announced (an EventBridge
        rule's delivery, made inside moto)."""
        if messages <= 0:
            return
        with self._wake:
            self._wakes += messages
            self._wake.notify(messages)

    def _take_wake(self) -> bool:
        """Sleep until there is a wake-up to take, and take it; False once the pool stops."""
        with self._wake:
            while not self._wakes and not self._stop.is_set():
                self.idle_workers += 1
                try:
                    self._wake.wait()
                finally:
                    self.idle_workers -= 1
            if self._stop.is_set():
                return False
            self._wakes -= 1
            return True

    def _serve(self) -> None:
        """One worker, for the pool's life: nothing an invocation does ends it."""
        while not self._stop.is_set():
            try:
                self._loop()
            except BaseException:  # a SystemExit of tool code, a bug of ours: the worker goes on
                logging.getLogger(__name__).exception("tool worker stopped; starting it again")

    def _loop(self) -> None:
        # A worker receives once per wake-up it takes (`start` wakes one for each message that
        # waits already): never an empty receive after each message.
        while not self._stop.is_set():
            if not self._take_wake():
                return
            try:
                # Short polls: a long poll waits inside moto's request, which holds the lock that
                # every other local request needs (infra/local/serial.py).
                with self._count_lock:
                    self.receives += 1
                received = self._sqs.receive_message(
                    QueueUrl=self._queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=0, AttributeNames=["All"]
                )
                for message in received.get("Messages", []):
                    # Unless deleted first, it shows again when its visibility timeout runs out.
                    self.alarm.set(self._visibility + ALARM_MARGIN_SECONDS, key=message["ReceiptHandle"])
                    self._handle(message)
            except BaseException:  # a worker thread outlives anything one invocation raises
                if self._stop.is_set():
                    return  # the runtime shut down under a running invocation: its queue is gone
                # As Lambda's poller: a failed receive or delete is tried again, never the end of it.
                logging.getLogger(__name__).exception("tool worker poll failed")

    def _handle(self, message: Mapping[str, Any]) -> None:
        event = {"Records": [sqs_record(message, self._queue_arn)]}
        with self._count_lock:
            self.invocations += 1
        try:
            response = call_handler(
                self._handler,
                event,
                LocalContext(
                    function_name=TOOL_WORKER.name,
                    timeout_seconds=self._timeout,
                    memory_limit_in_mb=TOOL_WORKER.memory_mb,
                ),
            )
        except BaseException:
            # As on Lambda: the message comes back after the visibility timeout. Said aloud, since
            # locally there is no CloudWatch to find it in.
            logging.getLogger(__name__).exception("tool worker invocation failed")
            return
        if not response.get("batchItemFailures"):
            self._sqs.delete_message(QueueUrl=self._queue_url, ReceiptHandle=message["ReceiptHandle"])
            self.alarm.cancel(message["ReceiptHandle"])
