"""When a refused DynamoDB write lost a race, for every store on the run table.

A conditional write is refused either because the condition we wrote was false (another
delivery, step or decision got there first: the caller's "already done" answer) or for any
other reason (throttling, a conflicting transaction, a validation error...), which the caller
must raise so that it, or the queue or state machine above it, tries again. Taking the second
for the first skips that retry: a worker then believes another delivery stored a result that
was never written.
"""

from typing import Any

from botocore.exceptions import ClientError

# A cancelled transaction gives one reason per item, in request order; an item that had none
# says so with the literal string "None" (AWS and moto alike). The codes:
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
_CONDITION_FALSE = "ConditionalCheckFailed"
_NO_REASON = (None, "None")


def lost_race(error: ClientError) -> bool:
    """True when a condition of the write was false, and nothing else went wrong.

    A single-item write refused by its condition raises `ConditionalCheckFailedException`. A
    transaction raises `TransactionCanceledException` for any reason: it lost a race only when
    its `CancellationReasons` name a failed condition and nothing but failed conditions. One
    cancelled by throttling, a conflict or a validation error, even beside a failed condition,
    or with no reasons at all, did not: tried again, it is written or refused by its condition
    alone.
    """
    code = error.response.get("Error", {}).get("Code")
    if code == "ConditionalCheckFailedException":
        return True
    if code != "TransactionCanceledException":
        return False
    # botocore puts the error's modelled fields beside "Error"; its TypedDict does not list them.
    response: dict[str, Any] = dict(error.response)
    reasons = [reason.get("Code") for reason in response.get("CancellationReasons") or []]
    failed = [reason for reason in reasons if reason not in _NO_REASON]
    return bool(failed) and all(reason == _CONDITION_FALSE for reason in failed)
