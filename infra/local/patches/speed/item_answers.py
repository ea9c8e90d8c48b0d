"""DynamoDB item operations answer with the JSON moto already built.

moto: responses go through moto's shape-driven serializer, which looks up ~6 attribute aliases
per member of every attribute value: a third of a GetItem's time.

Why it matters: every step of a run reads and writes items.

The patch: the item operations already build their answer as the wire's JSON
(`dynamo_to_dict`), so it is dumped as it is, with what the serializer would change (members
that are None left out, blobs as base64 text, only the operation's output members).
"""

import base64
import json
from typing import Any

from moto.dynamodb.responses import DynamoResult

CHECKED_WITH = ("5.2.5",)

_AS_BUILT = {
    "GetItem",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "Query",
    "Scan",
    "BatchGetItem",
    "BatchWriteItem",
    "TransactGetItems",
    "TransactWriteItems",
}
_serialize_result = DynamoResult.execute_result


def _as_wire(value: Any) -> Any:
    # As the serializer: members that are None are left out, and blobs are base64 text.
    if isinstance(value, dict):
        return {k: _as_wire(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_as_wire(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def _execute_result_as_built(self: DynamoResult, context: Any) -> Any:
    if context.operation_model.name not in _AS_BUILT or not isinstance(self.result, dict):
        return _serialize_result(self, context)
    # Only what the operation's answer has (moto adds the odd extra, e.g. to DeleteItem's).
    members = context.operation_model.output_shape.members
    answer = {k: v for k, v in self.result.items() if k in members}
    return 200, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(_as_wire(answer))


def install() -> None:
    DynamoResult.execute_result = _execute_result_as_built  # type: ignore[method-assign, assignment]
