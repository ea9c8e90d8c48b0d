"""DynamoDB refusing requests the way AWS does, on a real botocore client.

A `before-call` handler answers for DynamoDB, so botocore sends nothing (the table stays as it
was, as after any refusal) and raises what it raises for AWS's answer: the HTTP body DynamoDB
sends, parsed by botocore's own parser, modelled fields (`CancellationReasons`) included.
Nothing of the client is replaced; the handler is removed when the block ends.
"""

import io
import json
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.endpoint import convert_to_response_dict
from botocore.model import OperationModel
from botocore.parsers import create_parser
from urllib3.response import HTTPResponse

# What DynamoDB says with each cancellation reason: the TransactionCanceledException section of
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
REASON_MESSAGES = {
    "ConditionalCheckFailed": "The conditional request failed",
    "ItemCollectionSizeLimitExceeded": "Collection size exceeded.",
    "TransactionConflict": "Transaction is ongoing for the item.",
    "ProvisionedThroughputExceeded": "The level of configured provisioned throughput for the table was "
    "exceeded. Consider increasing your provisioning level with the UpdateTable API.",
    "ThrottlingError": "Throughput exceeds the current capacity of your table or index. DynamoDB is "
    "automatically scaling your table or index so please try again shortly. If exceptions persist, check "
    "if you have a hot key: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/"
    "bp-partition-key-design.html.",
    "ValidationError": "One or more parameter values were invalid.",
}


def error_body(code: str, message: str) -> bytes:
    """DynamoDB's body for a refused single-item request (`ConditionalCheckFailedException`...)."""
    return json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message}).encode()


def cancellation_body(*codes: str) -> bytes:
    """DynamoDB's body for a cancelled transaction: one reason per item, in request order; "None"
    (the literal string, message left out) for an item that had none. No codes: no reasons."""
    reasons = [
        {"Code": "None"} if code == "None" else {"Code": code, "Message": REASON_MESSAGES[code]}
        for code in codes
    ]
    body: dict[str, Any] = {
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "Message": f"Transaction cancelled, please refer cancellation reasons for specific reasons [{', '.join(codes)}]",
    }
    if codes:
        body["CancellationReasons"] = reasons
    return json.dumps(body).encode()


def _as_botocore_reads_it(
    operation: OperationModel, url: str, body: bytes
) -> tuple[AWSResponse, dict[str, Any]]:
    headers = {
        "x-amzn-RequestId": "refused-by-a-test",
        "Content-Type": "application/x-amz-json-1.0",
        "Content-Length": str(len(body)),
        "x-amz-crc32": str(zlib.crc32(body)),
    }
    raw = HTTPResponse(body=io.BytesIO(body), headers=headers, status=400, preload_content=False)
    http_headers = HTTPHeaders()
    for name, value in headers.items():
        http_headers[name] = value
    http = AWSResponse(url, 400, http_headers, raw)
    response = convert_to_response_dict(http, operation)
    parser = create_parser(operation.service_model.protocol)
    assert operation.output_shape is not None
    parsed: dict[str, Any] = parser.parse(response, operation.output_shape)
    # As botocore's endpoint does for an error it models: its fields beside "Error".
    shape = operation.service_model.shape_for_error_code(parsed["Error"]["Code"])
    if shape is not None:
        parsed.update(parser.parse(response, shape))
    return http, parsed


@contextmanager
def refused(client: Any, operation: str, *bodies: bytes) -> Iterator[list[dict[str, Any]]]:
    """The client's next calls of `operation` (one per body) are refused with these bodies, in
    order; later calls reach the table. Yields the refused calls' requests, as sent."""
    left = list(bodies)
    seen: list[dict[str, Any]] = []

    def answer(
        model: OperationModel, params: dict[str, Any], **_: Any
    ) -> tuple[AWSResponse, dict[str, Any]] | None:
        if not left:
            return None
        request, body = json.loads(params["body"]), left.pop(0)
        reasons = json.loads(body).get("CancellationReasons")
        # AWS gives exactly one reason per item: a test that says otherwise is a test of nothing real.
        assert reasons is None or len(reasons) == len(request["TransactItems"]), "one reason per item"
        seen.append(request)
        return _as_botocore_reads_it(model, params["url"], body)

    event = f"before-call.dynamodb.{operation}"
    client.meta.events.register_first(event, answer)
    try:
        yield seen
    finally:
        client.meta.events.unregister(event, answer)
