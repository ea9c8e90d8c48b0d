"""The run table in DynamoDB, for every store on it: its keys, how its items are read back, and
when a refused write lost a race.

Keys (one table; each store owns its items):

- a run: `pk=RUN#<id>` with `sk=META` (the run record), `MSG#<seq:06d>` (one history item each),
  `CALL#<seq:06d>` (the tool-call ledger), `GATE#<seq:06d>` (a gated call's approval),
  `STATE` (what tools share within a run), `PARENT_TOKEN` (the task token a child run answers),
  `COST` (the operations the run made, counters), `COST#EXECUTION#<name>` (an execution whose
  state transitions are counted) and `DEADLINE_CHECKS` (the timer's checks of the run's active
  time in its current execution);
- an approval: `pk=APPROVAL#<id>` with `sk=APPROVAL` (the record) and `sk=TOKEN` (its task token);
- a caller's quotas: `pk=QUOTA#<caller>` with `sk=MINUTE#<minute>` and `sk=RUNNING`;
- the `ByCaller` index: a caller's runs under `CALLER#<caller>`, its approvals under
  `APPROVALS#<caller>`. No other key holds a caller.
"""

from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

RUN_PREFIX = "RUN#"
APPROVAL_PREFIX = "APPROVAL#"
META_SK = "META"
MESSAGE_PREFIX = "MSG#"
GATE_PREFIX = "GATE#"
STATE_SK = "STATE"
PARENT_TOKEN_SK = "PARENT_TOKEN"
COST_SK = "COST"
COUNTED_EXECUTION_PREFIX = "COST#EXECUTION#"
DEADLINE_CHECKS_SK = "DEADLINE_CHECKS"

# `GET /runs` and `GET /approvals`: a global secondary index of records by caller, newest first.
CALLER_INDEX = "ByCaller"
CALLER_INDEX_PK = "gsi1pk"  # <partition prefix><caller>
CALLER_INDEX_SK = "gsi1sk"  # <created_at>#<id>
INDEX_KEYS = (CALLER_INDEX_PK, CALLER_INDEX_SK)
# What the index projects: what a listing shows and nothing that changes every turn (usage,
# updated_at), so a run's steps never rewrite its index entry. A run's keys in it are written on
# its META item only: the index holds one entry per run.
CALLER_INDEX_PROJECTION = ("run_id", "agent", "status", "caller", "created_at", "metadata", "parent")
RUNS_OF_CALLER = "CALLER#"
APPROVALS_OF_CALLER = "APPROVALS#"
QUOTAS_OF_CALLER = "QUOTA#"
RUNNING_SLOTS_SK = "RUNNING"

# DynamoDB's limit on a partition key, a global secondary index's included, in UTF-8 bytes:
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-partition-sort-keys
PARTITION_KEY_MAX_BYTES = 2048
# The longest caller identity every key it is written into can hold (2,038 bytes): the API
# refuses a longer one before anything is written, so no run or approval fails on its key.
MAX_CALLER_BYTES = PARTITION_KEY_MAX_BYTES - max(
    len(p.encode()) for p in (RUNS_OF_CALLER, APPROVALS_OF_CALLER, QUOTAS_OF_CALLER)
)
# The partitions a scan of the table may stop in: runs, approvals and callers' quota counters.
SCANNED_PARTITIONS = (RUN_PREFIX, APPROVAL_PREFIX, QUOTAS_OF_CALLER)


def run_pk(run_id: str) -> str:
    return f"{RUN_PREFIX}{run_id}"


def run_id_of(pk: str) -> str:
    return pk.removeprefix(RUN_PREFIX)


def message_sk(seq: int) -> str:
    return f"{MESSAGE_PREFIX}{seq:06d}"


def call_sk(seq: int) -> str:
    return f"CALL#{seq:06d}"


def gate_sk(seq: int) -> str:
    return f"{GATE_PREFIX}{seq:06d}"


def counted_execution_sk(execution: str) -> str:
    return f"{COUNTED_EXECUTION_PREFIX}{execution}"


def approval_pk(approval_id: str) -> str:
    return f"{APPROVAL_PREFIX}{approval_id}"


def quota_pk(caller: str) -> str:
    return f"{QUOTAS_OF_CALLER}{caller}"


def caller_fits(caller: str) -> bool:
    """Whether `caller` fits every key it is written into: at most `MAX_CALLER_BYTES` of UTF-8
    (a lone surrogate has no UTF-8 at all)."""
    try:
        return len(caller.encode()) <= MAX_CALLER_BYTES
    except UnicodeEncodeError:
        return False


def plain(value: Any) -> Any:
    """DynamoDB numbers come back as Decimal, at any depth (the run's parent link is a map)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# A cancelled transaction gives one reason per item, in request order; an item that had none
# says so with the literal string "None" (AWS and moto alike; a missing code reads the same). The codes:
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
CONDITION_FALSE = "ConditionalCheckFailed"
_NO_REASON = "None"


def cancellation_codes(error: ClientError) -> list[str]:
    """A cancelled transaction's reason codes, one per item in request order ("None": no reason)."""
    # botocore puts the error's modelled fields beside "Error"; its TypedDict does not list them.
    response: dict[str, Any] = dict(error.response)
    return [str(reason.get("Code")) for reason in response.get("CancellationReasons") or []]


def lost_race(error: ClientError) -> bool:
    """True when a condition of the write was false, and nothing else went wrong.

    A conditional write is refused either because the condition we wrote was false (another
    delivery, step or decision got there first: the caller's "already done" answer) or for any
    other reason (throttling, a conflicting transaction, a validation error...), which the
    caller must raise so that it, or the queue or state machine above it, tries again. Taking
    the second for the first skips that retry: a worker then believes another delivery stored a
    result that was never written.

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
    failed = [reason for reason in cancellation_codes(error) if reason != _NO_REASON]
    return bool(failed) and all(reason == CONDITION_FALSE for reason in failed)
