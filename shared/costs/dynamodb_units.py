"""DynamoDB request units, computed from the items a request wrote or read, the way on-demand
DynamoDB bills them: a write unit per 1 KB written, a read unit per 4 KB read (half that
eventually consistent), twice as much in a transaction, and at least one unit per item.

Computed rather than read from `ConsumedCapacity`: moto (5.2.5, what the local runtime and the
tests run on) answers a constant there for gets, queries and puts, and nothing for updates and
transactions, so the one measure that holds both locally and on AWS is the items themselves.
Where the caller never sees the whole item, the figure is a lower bound: a read with a
projection or a filter (billed on the whole items read), an update inside a transaction (billed
on the larger of the item before and after). Outside transactions, the meter asks for the item
back (`ReturnValues`) so an update or a delete is billed on its real size (`meter.py`).
Item sizes: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
"""

import base64
import math
from typing import Any

READ_UNIT_BYTES = 4096
WRITE_UNIT_BYTES = 1024
TRANSACTION_FACTOR = 2


def value_size(value: dict[str, Any]) -> int:
    """The billed size of one attribute value in DynamoDB's wire form (`{"S": "..."}`)."""
    ((kind, data),) = value.items()
    if kind == "S":
        return len(str(data).encode())
    if kind == "N":
        return _number_size(str(data))
    if kind == "B":
        return len(_binary(data))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(s).encode()) for s in data)
    if kind == "NS":
        return sum(_number_size(str(n)) for n in data)
    if kind == "BS":
        return sum(len(_binary(b)) for b in data)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in data.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: dict[str, Any]) -> int:
    """Attribute names plus values, in bytes."""
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def _number_size(text: str) -> int:
    # About one byte per two significant digits, plus one.
    digits = text.lstrip("-").replace(".", "").lstrip("0").rstrip("0") or "0"
    return math.ceil(len(digits) / 2) + 1


def _binary(data: Any) -> bytes:
    return bytes(data) if isinstance(data, bytes | bytearray) else base64.b64decode(data)


def write_units(size: int) -> int:
    return max(1, math.ceil(size / WRITE_UNIT_BYTES))


def read_units(size: int, consistent: bool) -> float:
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2


def request_size(params: dict[str, Any]) -> int:
    """What an update, delete or condition check shows of the item: its key and the values it
    writes (the lower bound of its size)."""
    key = item_size(params.get("Key") or {})
    values = params.get("ExpressionAttributeValues") or {}
    names = params.get("ExpressionAttributeNames") or {}
    return key + sum(value_size(v) for v in values.values()) + sum(len(n.encode()) for n in names.values())


def units(operation: str, params: dict[str, Any], parsed: dict[str, Any]) -> tuple[float, int]:
    """(read units, write units) of one DynamoDB request and its answer."""
    error = parsed.get("Error", {}).get("Code")
    if error is not None:
        return _refused(operation, params, error)
    consistent = bool(params.get("ConsistentRead"))
    if operation == "GetItem":
        return read_units(item_size(parsed.get("Item") or {}), consistent), 0
    if operation in ("Query", "Scan"):
        total = sum(item_size(item) for item in parsed.get("Items") or [])
        return read_units(total, consistent), 0
    if operation == "BatchGetItem":
        return _batch_get(params, parsed), 0
    if operation == "TransactGetItems":
        found = parsed.get("Responses") or []
        return sum(TRANSACTION_FACTOR * read_units(item_size(r.get("Item") or {}), True) for r in found), 0
    if operation == "PutItem":
        return 0, write_units(item_size(params.get("Item") or {}))
    if operation in ("UpdateItem", "DeleteItem"):
        attributes = parsed.get("Attributes")
        size = item_size(attributes) if attributes else request_size(params)
        return 0, write_units(size)
    if operation == "BatchWriteItem":
        return 0, _batch_write(params, parsed)
    if operation == "TransactWriteItems":
        return 0, TRANSACTION_FACTOR * sum(
            _transact_item(entry) for entry in params.get("TransactItems") or []
        )
    return 0, 0  # the control plane (DescribeTable...) is not billed per request


def _refused(operation: str, params: dict[str, Any], code: str) -> tuple[float, int]:
    # A write refused by its condition is billed as written; a cancelled transaction for what
    # it checked and would have written; throttles and validation errors cost nothing.
    if code == "ConditionalCheckFailedException" and operation in ("PutItem", "UpdateItem", "DeleteItem"):
        item = params.get("Item")
        return 0, write_units(item_size(item) if item else request_size(params))
    if code == "TransactionCanceledException" and operation == "TransactWriteItems":
        return 0, TRANSACTION_FACTOR * sum(
            _transact_item(entry) for entry in params.get("TransactItems") or []
        )
    return 0, 0


def _transact_item(entry: dict[str, Any]) -> int:
    ((kind, body),) = entry.items()
    if kind == "Put":
        return write_units(item_size(body.get("Item") or {}))
    return write_units(request_size(body))


def _batch_get(params: dict[str, Any], parsed: dict[str, Any]) -> float:
    total = 0.0
    for table, items in (parsed.get("Responses") or {}).items():
        consistent = bool((params.get("RequestItems") or {}).get(table, {}).get("ConsistentRead"))
        total += sum(read_units(item_size(item), consistent) for item in items)
    return total


def _batch_write(params: dict[str, Any], parsed: dict[str, Any]) -> int:
    left = sum(len(v) for v in (parsed.get("UnprocessedItems") or {}).values())
    done = 0
    for requests in (params.get("RequestItems") or {}).values():
        for request in requests:
            put = request.get("PutRequest")
            done += write_units(item_size(put["Item"])) if put else 1
    # What came back unprocessed was not written (retried, it is counted then): at least a unit each.
    return max(0, done - left)
