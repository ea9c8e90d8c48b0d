"""Per-request limits AWS enforces and moto 5.2.5 does not, checked on each local function's calls.

moto accepts requests AWS refuses: an EventBridge entry of any size, a Lambda payload of any
size, an SQS message counted in characters (AWS counts bytes, attributes included), email to
anyone from an account AWS would keep in the SES sandbox, and a DynamoDB number of more than 38
significant digits (moto checks a number's range only in PutItem's item, and never its digits:
a float written as `Decimal(0.1)` has 55). A local run would then pass where the
deployed one fails. `check` refuses such a call before it is sent, with the error AWS answers; it
runs on every call a function (or the state machine) makes, from `iam.py`'s hook into botocore,
after the call is authorized. Calls outside any function (the developer's, the runtime's own)
are not checked, as IAM does not check them here either.

A limit moto already enforces as AWS does (a DynamoDB item over 400 KB, keys over 2,048 and
1,024 bytes, a state's input or output over 256 KiB) is not repeated here; the local runtime's
page (docs/design/local-runtime.md) lists which is which, measured.
"""

import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from decimal import Decimal, InvalidOperation
from email.utils import getaddresses
from typing import IO, Any
from urllib.parse import urlsplit
from weakref import WeakKeyDictionary

from botocore.exceptions import ClientError

# Lambda: 6 MB each way for a synchronous invocation, 1 MB for an asynchronous (Event) request
# (moto already fails a response over 6,000,000 bytes, a little before AWS does).
# https://docs.aws.amazon.com/lambda/latest/dg/API_Invoke.html
# https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
LAMBDA_SYNC_PAYLOAD_BYTES = 6 * 1024 * 1024
LAMBDA_ASYNC_PAYLOAD_BYTES = 1024 * 1024
# EventBridge: the entries of one PutEvents request together under 256 KB, each entry counted as
# https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-putevent-size.html counts it.
EVENTS_REQUEST_BYTES = 256 * 1024
# SES: a new account is in the sandbox in each Region: it sends only to verified addresses and
# domains (and the mailbox simulator), and 200 messages in 24 hours (each recipient counts).
# https://docs.aws.amazon.com/ses/latest/dg/request-production-access.html
SES_SANDBOX_DAILY_MESSAGES = 200
SES_SIMULATOR_DOMAIN = "simulator.amazonses.com"

# SQS: a message, body and attributes, in UTF-8 bytes, up to the queue's MaximumMessageSize
# (at most, and by default, 1 MiB).
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html
SQS_MAXIMUM_MESSAGE_BYTES = 1024 * 1024

# DynamoDB: a number has at most 38 significant digits, its magnitude from 1E-130 to
# 9.9999999999999999999999999999999999999E+125 (or it is 0).
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html
DYNAMODB_NUMBER_DIGITS = 38
DYNAMODB_NUMBER_EXPONENTS = range(-130, 126)  # the exponent of its first digit
# A number as DynamoDB reads one: ASCII digits, an optional sign and exponent (Python's Decimal
# also takes "1_000", "Infinity" and other scripts' digits, which AWS does not).
_NUMBER = re.compile(r"[+-]?(?P<digits>[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE](?P<exponent>[+-]?[0-9]+))?")
_OVERFLOW = "Number overflow. Attempting to store a number with magnitude larger than supported range"
_UNDERFLOW = "Number underflow. Attempting to store a number with magnitude smaller than supported range"


def _error(code: str, message: str, status: int, operation: str) -> ClientError:
    # Typed loosely: botocore's TypedDict wants the metadata a real response carries.
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, operation)


def _payload_bytes(payload: bytes | str | IO[bytes] | None) -> bytes:
    if payload is None:
        return b""
    if isinstance(payload, str):
        return payload.encode()
    if isinstance(payload, bytes | bytearray):
        return bytes(payload)
    # A file: read it, then hand botocore the bytes (a stream read once is empty).
    return payload.read()


def _lambda(operation: str, params: dict[str, Any]) -> None:
    if operation != "Invoke":
        return
    payload = _payload_bytes(params.get("Payload"))
    params["Payload"] = payload
    limit = (
        LAMBDA_ASYNC_PAYLOAD_BYTES if params.get("InvocationType") == "Event" else LAMBDA_SYNC_PAYLOAD_BYTES
    )
    if len(payload) > limit:
        raise _error(
            "RequestTooLargeException",
            f"Request must be smaller than {limit} bytes for the InvokeFunction operation",
            413,
            operation,
        )


def event_entry_bytes(entry: dict[str, Any]) -> int:
    """An entry's size as EventBridge counts it: 14 for a Time, the UTF-8 bytes of the source,
    detail-type, detail and each resource."""
    size = 14 if entry.get("Time") is not None else 0
    for name in ("Source", "DetailType", "Detail"):
        size += len(str(entry.get(name) or "").encode())
    return size + sum(len(str(resource).encode()) for resource in entry.get("Resources") or [])


def _events(operation: str, params: dict[str, Any]) -> None:
    if operation != "PutEvents":
        return
    if sum(event_entry_bytes(entry) for entry in params.get("Entries", [])) > EVENTS_REQUEST_BYTES:
        raise _error(
            "ValidationException",
            "Total size of the entries in the request is over the limit.",
            400,
            operation,
        )


def _message_bytes(body: str, attributes: dict[str, Any]) -> int:
    # SQS counts the body and each attribute's name, type and value, in bytes.
    size = len(body.encode())
    for name, attribute in attributes.items():
        value = attribute.get("StringValue") or attribute.get("BinaryValue") or b""
        size += len(name.encode()) + len(str(attribute.get("DataType", "")).encode())
        size += len(value.encode() if isinstance(value, str) else value)
    return size


def _sqs(operation: str, params: dict[str, Any]) -> None:
    if operation == "SendMessage":
        messages = [params]
    elif operation == "SendMessageBatch":
        messages = list(params.get("Entries", []))
    else:
        return
    limit = _queue_limit(str(params.get("QueueUrl", "")))
    for message in messages:
        if (
            _message_bytes(str(message.get("MessageBody", "")), message.get("MessageAttributes") or {})
            > limit
        ):
            # moto's own answer, which AWS gives too; moto compares characters, not bytes.
            raise _error(
                "InvalidParameterValue",
                f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes.",
                400,
                operation,
            )


def _number_values(value: Any) -> Iterator[str]:
    """Each number in an attribute value (`{"N": ...}`, a number set, inside maps and lists)."""
    if not isinstance(value, dict):
        return
    for kind, inner in value.items():
        if kind == "N":
            yield inner
        elif kind == "NS" and isinstance(inner, list):
            yield from inner
        elif kind == "M" and isinstance(inner, dict):
            for member in inner.values():
                yield from _number_values(member)
        elif kind == "L" and isinstance(inner, list):
            for member in inner:
                yield from _number_values(member)


def _written_values(operation: str, params: dict[str, Any]) -> Iterator[Any]:
    """The attribute values of a write: its items, keys and expression values."""
    requests: list[dict[str, Any]] = []
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        requests = [params]
    elif operation == "BatchWriteItem":
        for writes in (params.get("RequestItems") or {}).values():
            for write in writes:
                requests.extend(w for w in (write.get("PutRequest"), write.get("DeleteRequest")) if w)
    elif operation == "TransactWriteItems":
        for item in params.get("TransactItems") or []:
            requests.extend(item.values())
    for request in requests:
        yield from (request.get("Item") or {}).values()
        yield from (request.get("Key") or {}).values()
        yield from (request.get("ExpressionAttributeValues") or {}).values()
        for update in (request.get("AttributeUpdates") or {}).values():
            yield update.get("Value")


def _number_refusal(number: str) -> str | None:
    """AWS's message for a number it does not store; None for one it does."""
    form = _NUMBER.fullmatch(number)
    if form is None:
        return f"The parameter cannot be converted to a numeric value: {number}"
    if form["exponent"] is None and len(number) <= DYNAMODB_NUMBER_DIGITS:
        return None  # at most 38 digits, so between 1E-37 and 1E38: most numbers, read at once
    try:
        value = Decimal(number)
    except InvalidOperation:  # an exponent past what Python's decimal holds (10**18)
        if not form["digits"].strip("0."):
            return None  # zero, whatever its exponent
        small = (form["exponent"] or "").startswith("-")
        return _UNDERFLOW if small else _OVERFLOW
    if value.is_zero():
        return None
    # Leading zeros are not among the digits; trailing ones are not significant.
    significant = len("".join(map(str, value.as_tuple().digits)).rstrip("0"))
    if significant > DYNAMODB_NUMBER_DIGITS:
        return f"Attempting to store more than {DYNAMODB_NUMBER_DIGITS} significant digits in a Number"
    if value.adjusted() > DYNAMODB_NUMBER_EXPONENTS[-1]:
        return _OVERFLOW
    if value.adjusted() < DYNAMODB_NUMBER_EXPONENTS[0]:
        return _UNDERFLOW
    return None


def _dynamodb(operation: str, params: dict[str, Any]) -> None:
    for value in _written_values(operation, params):
        for number in _number_values(value):
            refusal = _number_refusal(number)
            if refusal is not None:
                raise _error("ValidationException", refusal, 400, operation)


def _queue_limit(url: str) -> int:
    """The queue's `MaximumMessageSize` (a queue moto does not know: its default)."""
    from moto.sqs.models import sqs_backends

    from toolpipe.infra.local.iam import REGION

    # https://sqs.REGION.amazonaws.com/ACCOUNT/NAME
    account, name = [*urlsplit(url).path.strip("/").split("/"), "", ""][:2]
    try:
        return int(sqs_backends[account][REGION].get_queue(name).attributes["MaximumMessageSize"])
    except Exception:  # an unknown queue: moto answers that error itself
        return SQS_MAXIMUM_MESSAGE_BYTES


class _SesSandbox:
    """What a new account's SES allows: the recipients it verified, 200 messages a day."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # When each message was sent (one per recipient), per moto backend (one per runtime).
        self._sent: WeakKeyDictionary[Any, deque[float]] = WeakKeyDictionary()

    def check(self, operation: str, params: dict[str, Any]) -> None:
        if operation not in ("SendEmail", "SendRawEmail"):
            return
        from moto.ses.models import ses_backends

        from toolpipe.infra.local.iam import ACCOUNT, REGION

        backend = ses_backends[ACCOUNT][REGION]
        source = str(params.get("Source") or params.get("FromEmailAddress") or "")
        if source and not backend._is_verified_address(source):
            return  # moto refuses an unverified sender itself, as AWS does
        recipients = _recipients(params)
        unverified = [
            address
            for address in recipients
            if address.rsplit("@", 1)[-1].lower() != SES_SIMULATOR_DOMAIN
            and not _verified_recipient(backend, address)
        ]
        if unverified:
            raise _error(
                "MessageRejected",
                "Email address is not verified. The following identities failed the check in "
                f"region {REGION.upper()}: {', '.join(unverified)}",
                400,
                operation,
            )
        with self._lock:
            sent = self._sent.setdefault(backend, deque())
            now = time.monotonic()
            while sent and sent[0] <= now - 24 * 3600:
                sent.popleft()
            if len(sent) + len(recipients) > SES_SANDBOX_DAILY_MESSAGES:
                raise _error("Throttling", "Daily message quota exceeded.", 400, operation)
            sent.extend([now] * len(recipients))


def _verified_recipient(backend: Any, address: str) -> bool:
    """Whether SES counts `address` as verified: the address itself, or its domain or any
    domain above it ("when you verify a domain identity, you can send email from any subdomain
    or email address of the verified domain",
    https://docs.aws.amazon.com/ses/latest/dg/creating-identities.html), a domain in any case,
    as DNS reads it. moto matches the exact host only, in its exact case."""
    if backend._is_verified_address(address):
        return True
    domains = {str(identity).lower() for identity in backend.email_identities if "@" not in str(identity)}
    labels = address.rsplit("@", 1)[-1].lower().split(".")
    return any(".".join(labels[i:]) in domains for i in range(len(labels)))


def _recipients(params: dict[str, Any]) -> list[str]:
    if "Destination" in params:  # SendEmail
        destination = params["Destination"]
        listed = [*destination.get("ToAddresses", []), *destination.get("CcAddresses", [])]
        listed += destination.get("BccAddresses", [])
    elif params.get("Destinations"):  # SendRawEmail naming them
        listed = list(params["Destinations"])
    else:  # SendRawEmail: the message's own headers
        raw = params.get("RawMessage", {}).get("Data", b"")
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        headers = text.split("\r\n\r\n", 1)[0].split("\n\n", 1)[0]
        listed = [
            line.split(":", 1)[1]
            for line in headers.splitlines()
            if line.split(":", 1)[0].strip().lower() in ("to", "cc", "bcc")
        ]
    return [address for _, address in getaddresses(listed) if address]


_ses_sandbox = _SesSandbox()

_RULES: dict[str, Callable[[str, dict[str, Any]], None]] = {
    "lambda": _lambda,
    "events": _events,
    "sqs": _sqs,
    "ses": _ses_sandbox.check,
}


def check(service: str, operation: str, params: dict[str, Any]) -> None:
    """Raise the ClientError AWS answers when the call breaks one of the limits above.

    Args:
        service: The service's signing name (`lambda`, `events`, `sqs`, `ses`, ...).
        operation: The API operation (`Invoke`, `PutEvents`, ...).
        params: The call's parameters (a Lambda payload given as a file is read into bytes).
    """
    rule = _RULES.get(service)
    if rule is not None:
        rule(operation, params)


# Checked on the parameters as botocore sends them: a Table resource's values are attribute
# values only then (boto3 converts them as the call is built), and their shapes checked.
_SENT_RULES: dict[str, Callable[[str, dict[str, Any]], None]] = {"dynamodb": _dynamodb}


def check_sent(service: str, operation: str, params: dict[str, Any]) -> None:
    """`check`, for the limits read from a call's parameters as sent: after boto3 has made a
    resource's values attribute values (`{"N": "1E+126"}` from `Decimal("1E126")`) and botocore
    has checked their shapes (a malformed call gets botocore's own error first)."""
    rule = _SENT_RULES.get(service)
    if rule is not None:
        rule(operation, params)
