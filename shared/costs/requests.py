"""What one AWS request the pipeline made counts as, by service and operation.

Step Functions, Lambda `Invoke` and Secrets Manager requests count nothing here: Step Functions
Standard bills state transitions, not API requests (`transitions.py` counts those); an invoke is
billed as the invoked function's request and duration, which its own meter (or, for the tool
runner, the worker's) counts.
"""

import json
import math
from typing import Any

from toolpipe.shared.costs import dynamodb_units

# SQS and EventBridge bill a request or an event per 64 KB chunk of payload.
CHUNK_BYTES = 64 * 1024
# S3 tier 1 (PUT, COPY, POST, LIST); DELETE is free; everything else is tier 2 (GET, HEAD...).
_S3_TIER1_PREFIXES = ("Put", "Copy", "List", "Create", "Complete", "Upload", "Restore", "Post")
_S3_FREE_PREFIXES = ("Delete", "Abort")


def counters(
    service: str, operation: str, params: dict[str, Any], parsed: dict[str, Any]
) -> dict[str, float]:
    """The counters one request adds (flat names of `Operations.counters()`)."""
    if service == "dynamodb":
        reads, writes = dynamodb_units.units(operation, params, parsed)
        return {"dynamodb_requests": 1, "read_units": reads, "write_units": writes}
    if service == "s3":
        return _s3(operation)
    if service == "sqs":
        return {"sqs_requests": _sqs_requests(operation, params)}
    if service == "events" and operation == "PutEvents":
        return {"events": _events(params, parsed)}
    return {}


def _s3(operation: str) -> dict[str, float]:
    if operation.startswith(_S3_FREE_PREFIXES):
        return {}
    if operation.startswith(_S3_TIER1_PREFIXES):
        return {"s3_tier1_requests": 1}
    return {"s3_tier2_requests": 1}


def chunks(size: int) -> int:
    return max(1, math.ceil(size / CHUNK_BYTES))


def _sqs_requests(operation: str, params: dict[str, Any]) -> int:
    if operation == "SendMessage":
        return chunks(_message_size(params))
    if operation == "SendMessageBatch":
        return chunks(sum(_message_size(entry) for entry in params.get("Entries") or []))
    return 1


def _message_size(message: dict[str, Any]) -> int:
    size = len(str(message.get("MessageBody", "")).encode())
    for name, attribute in (message.get("MessageAttributes") or {}).items():
        size += len(name.encode()) + len(json.dumps(attribute, default=str).encode())
    return size


def _events(params: dict[str, Any], parsed: dict[str, Any]) -> int:
    entries = params.get("Entries") or []
    results = parsed.get("Entries") or [{}] * len(entries)
    total = 0
    for entry, result in zip(entries, results, strict=False):
        if result.get("ErrorCode"):
            continue  # refused: not put, not billed
        size = sum(len(str(entry.get(k, "")).encode()) for k in ("Source", "DetailType", "Detail"))
        size += sum(len(r.encode()) for r in entry.get("Resources") or [])
        total += chunks(size)
    return total


def delivered(first_delivery: bool) -> dict[str, float]:
    """What Lambda's SQS poller made to hand a function one message (batch size 1): the receive
    that took it, and the send that put it there (made by the state machine's Dispatch state) on
    its first delivery. Its delete is `DELETED`, counted once the record succeeded."""
    return {"sqs_requests": 2 if first_delivery else 1}


DELETED: dict[str, float] = {"sqs_requests": 1}
