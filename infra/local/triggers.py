"""The S3 and EventBridge triggers on the local runtime, wired as the stack wires them.

- **S3**: a notification on the trigger bucket's input prefix invokes the triggers function.
  moto delivers S3 notifications to Lambda through the function's invoke, which
  `infra/local/lambdas.py` runs in-process: a `put_object` runs the real handler on the
  notification moto builds, inside the put (as synchronous as moto makes it). moto's event
  lacks two fields AWS always sends and the handler needs to tell duplicates apart —
  `sequencer`, and `versionId` in a versioned bucket — so `install()` adds them.
- **EventBridge**: moto's rules cannot target a Lambda function (NotImplementedError), but
  deliver to SQS. The RunRequested rule on the local bus targets a queue; one local worker
  (`infra/local/workers.py`) hands each message's body, the event exactly as EventBridge
  built it, to the real handler. A `PutEvents` wakes it rather than the pool's safety poll
  (every 0.5 s). Measured here (6 puts each, runs executing meanwhile): `put_events` to the run
  record written 56-446 ms, median ~90 ms; a `put_object` returns once its run has started,
  34-73 ms (0.5 s the first time: the handler's imports).

The local bucket is not versioned, so locally a run is keyed by the notification's sequencer
and reads its object with `If-Match` on the ETag (the deployed bucket is versioned, and keys
and reads go by version); the handler takes both paths.
"""

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from moto.s3 import notifications

from toolpipe.infra.cdk.functions import TRIGGERS
from toolpipe.infra.local.iam import queue_arn
from toolpipe.infra.local.lambdas import LocalContext, call_function
from toolpipe.infra.local.process_patch import Patched
from toolpipe.infra.local.workers import BATCH_MAX
from toolpipe.shared.settings import RUN_REQUESTED_SOURCE
from toolpipe.shared.triggers.events import RUN_REQUESTED_DETAIL_TYPE

if TYPE_CHECKING:
    from mypy_boto3_events.client import EventBridgeClient
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_sqs.client import SQSClient

TRIGGERS_HANDLER = TRIGGERS.handler
HANDLER = (
    "toolpipe.infra.local.triggers.sqs_to_triggers"  # the queue consumer standing in for the rule's target
)
TRIGGER_BUCKET = "toolpipe-local-inputs"
INPUT_PREFIX = "inbox/"
OUTPUT_PREFIX = "answers/"
# The RunRequested rule's pattern as the stack makes it by default (infra/cdk/constructs/triggers.py);
# the runtime applies the template's own, whose sources the deployer may have named.
RUN_REQUESTED_PATTERN = {"source": [RUN_REQUESTED_SOURCE], "detail-type": [RUN_REQUESTED_DETAIL_TYPE]}

_original_s3_event = notifications._get_s3_event


def _sequencer(key: Any) -> str:
    # AWS's is an opaque hex string that grows with each write of a key. This one is the stored
    # object's write time and ETag: every write of the key differs, and the notifications moto
    # sends for one write (a multipart upload sends two) share it, as AWS's retries do.
    written = int(key.last_modified.timestamp() * 1_000_000)
    return f"{written:016X}{hashlib.sha256(str(key.etag).encode()).hexdigest()[:8].upper()}"


def _s3_event_as_aws_sends_it(event_name: str, bucket: Any, key: Any, notification_id: str) -> dict[str, Any]:
    event: dict[str, Any] = _original_s3_event(event_name, bucket, key, notification_id)
    for record in event["Records"]:
        entity = record["s3"]["object"]
        entity["sequencer"] = _sequencer(key)
        if bucket.is_versioned:
            entity["versionId"] = key.version_id
    return event


_PATCHED = Patched([(notifications, "_get_s3_event", _s3_event_as_aws_sends_it)])


def install() -> Callable[[], None]:
    """Give moto's S3 notifications the `sequencer` and `versionId` AWS sends, until the last
    runtime's undo."""
    return _PATCHED.install()


def sqs_to_triggers(event: dict[str, Any], context: LocalContext) -> dict[str, Any]:
    """Each SQS record's body is an EventBridge event: hand it to the triggers function as
    EventBridge would. A record whose invocation raised comes back after the visibility
    timeout, as an EventBridge retry would."""
    failures = []
    for record in event["Records"]:
        try:
            call_function(TRIGGERS, json.loads(record["body"]))
        except Exception:
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


def notify_on_input_prefix(
    s3: "S3Client", function_arn: str, bucket: str = TRIGGER_BUCKET, prefix: str = INPUT_PREFIX
) -> None:
    """Objects created under the input prefix invoke the triggers function, as the template's
    bucket notification says. Set after the saved state is restored: restoring an input must not
    start its run again."""
    s3.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={
            "LambdaFunctionConfigurations": [
                {
                    "LambdaFunctionArn": function_arn,
                    "Events": ["s3:ObjectCreated:*"],
                    "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": prefix}]}},
                }
            ]
        },
    )


def put_quietly(s3: "S3Client", key: str, body: bytes) -> dict[str, Any]:
    """Put an object into the trigger bucket without its notification: for delivering a
    sample notification of it by hand (`toolpipe invoke triggers`, tests) and nothing else.
    Returns what a notification of this put says of the object (`eTag`, `size`, `versionId`)."""
    saved = s3.get_bucket_notification_configuration(Bucket=TRIGGER_BUCKET)
    saved.pop("ResponseMetadata", None)  # type: ignore[misc]
    s3.put_bucket_notification_configuration(Bucket=TRIGGER_BUCKET, NotificationConfiguration={})
    try:
        put = s3.put_object(Bucket=TRIGGER_BUCKET, Key=key, Body=body)
    finally:
        s3.put_bucket_notification_configuration(
            Bucket=TRIGGER_BUCKET,
            NotificationConfiguration=saved,  # type: ignore[arg-type]
        )
    described: dict[str, Any] = {"eTag": put["ETag"].strip('"'), "size": len(body)}
    if put.get("VersionId"):
        described["versionId"] = put["VersionId"]
    return described


def create_event_trigger(
    events: "EventBridgeClient",
    sqs: "SQSClient",
    bus: str,
    *,
    pattern: dict[str, Any] | None = None,
    enabled: bool = True,
) -> tuple[str, str]:
    """The RunRequested rule on the runtime's bus, with the template's `pattern` (disabled, as
    the template may say), and the queue standing in for the rule's Lambda target: (queue URL,
    queue ARN)."""
    url = sqs.create_queue(QueueName="toolpipe-local-trigger-events")["QueueUrl"]
    arn = queue_arn(url)
    events.put_rule(
        Name="toolpipe-local-run-requested",
        EventBusName=bus,
        EventPattern=json.dumps(pattern or RUN_REQUESTED_PATTERN),
        State="ENABLED" if enabled else "DISABLED",
    )
    events.put_targets(
        Rule="toolpipe-local-run-requested", EventBusName=bus, Targets=[{"Id": "triggers", "Arn": arn}]
    )
    return url, arn


def run_requests(request: Any) -> int:
    """How many `RunRequested` events a request may carry: a `PutEvents`'s entries that name
    one (the run events the pipeline puts on the same bus do not: waking the trigger workers for
    those cost a receive each). A count, as each event is a message of the trigger queue: woken
    once for three, the one worker took one and left two to its safety poll."""
    target = request.headers.get("X-Amz-Target") or b""
    if (target.encode() if isinstance(target, str) else target) != b"AWSEvents.PutEvents":
        return 0
    body = request.body or b""
    named = (body.encode() if isinstance(body, str) else body).count(RUN_REQUESTED_DETAIL_TYPE.encode())
    # At most `PutEvents`' ten entries: a detail that repeats the name must not be many receives.
    return min(named, BATCH_MAX)
