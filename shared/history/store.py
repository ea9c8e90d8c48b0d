"""Run history in one DynamoDB table: one item per message, appended, never rewritten.

Keys: `pk=RUN#<id>` with `sk=META` (the run record), `sk=MSG#<seq:06d>` (one history item
each), `sk=CALL#<seq:06d>` (the tool-call ledger: CLAIMED, then DONE in the same transaction
that stores the result) and `sk=STATE` (what tools share within a run). A caller's quotas
(shared/runs/quota.py): `pk=QUOTA#<caller>` with `sk=MINUTE#<minute>` (starts in that minute,
a counter that expires) and `sk=RUNNING` (the set of run ids holding its running slots). An item
whose JSON would pass `inline_content_limit` is stored in S3 and the DynamoDB item keeps a
reference: items stop at 400 KB. When a run ends, all of it gets one expiry
(`shared/history/retention.py`).
"""

import json
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from toolpipe.shared.errors import InvalidCursorError, QuotaExceededError, RunNotFoundError
from toolpipe.shared.history import retention
from toolpipe.shared.history.conditions import lost_race
from toolpipe.shared.history.ports import (
    ERROR_MAX_CHARS,
    LIST_READ_FACTOR,
    OUTPUT_INLINE_CHARS,
    Admission,
    CallRead,
    Claim,
    ClaimState,
    Cursor,
)
from toolpipe.shared.messages import (
    HISTORY_ITEM,
    HandoffRecord,
    HistoryItem,
    RunRecord,
    RunStatus,
    RunSummary,
    ToolResult,
    Usage,
    utc_now,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table
    from mypy_boto3_s3.client import S3Client

MSG_PREFIX = "MSG#"
# Runs whose history prefix a warm container keeps: an orchestrator container serves one step
# at a time, so a few runs cover the steps it serves back to back; the rest are read again.
HISTORY_CACHE_RUNS = 32
_USAGE = tuple(Usage.model_fields)
# A root run's record also counts what the runs below it used (its agent-tool runs, theirs...):
# its tree's totals are its own plus these. Kept apart so a root's own call adds its usage once.
_TREE = tuple(f"tree_{name}" for name in _USAGE)


# `GET /runs`: a global secondary index of run records by caller, newest first. Its keys are
# written on the META item only, so the index holds one entry per run. It projects what a
# listing shows and nothing that changes every turn (usage, updated_at): a run's steps never
# rewrite its index entry.
CALLER_INDEX = "ByCaller"
CALLER_INDEX_PK = "gsi1pk"  # CALLER#<caller>
CALLER_INDEX_SK = "gsi1sk"  # <created_at>#<run_id>
CALLER_INDEX_PROJECTION = ("run_id", "agent", "status", "caller", "created_at", "metadata", "parent")
_INDEX_KEYS = (CALLER_INDEX_PK, CALLER_INDEX_SK)
# The caller index's partitions: a caller's runs (here) and the approvals of its runs
# (shared/approvals/store.py), each under its own prefix. No other key holds a caller.
RUNS_OF_CALLER = "CALLER#"
APPROVALS_OF_CALLER = "APPROVALS#"
# The partition of a caller's quota counters (shared/runs/quota.py): a key of the table, not of
# the index, bounded the same way.
QUOTAS_OF_CALLER = "QUOTA#"
RUNNING_SLOTS_SK = "RUNNING"
# The META attribute of a run that holds a running slot: its ending gives the slot back.
HOLDS_SLOT = "holds_slot"
# DynamoDB's limit on a partition key, a global secondary index's included, in UTF-8 bytes:
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-partition-sort-keys
PARTITION_KEY_MAX_BYTES = 2048
# The longest caller identity every key it is written into can hold (2,038 bytes): the API
# refuses a longer one before anything is written, so no run or approval fails on its key.
MAX_CALLER_BYTES = PARTITION_KEY_MAX_BYTES - max(
    len(p.encode()) for p in (RUNS_OF_CALLER, APPROVALS_OF_CALLER, QUOTAS_OF_CALLER)
)
# The partitions of the table a scan's read may stop in: runs, approvals (shared/approvals/store.py)
# and callers' quota counters.
SCANNED_PARTITIONS = ("RUN#", "APPROVAL#", QUOTAS_OF_CALLER)
# A scan (the admin's listing of every run) reads this many items a request: most are messages.
SCAN_READ_ITEMS = 1000


def caller_fits(caller: str) -> bool:
    """Whether `caller` fits every key it is written into: at most `MAX_CALLER_BYTES` of UTF-8
    (a lone surrogate has no UTF-8 at all)."""
    try:
        return len(caller.encode()) <= MAX_CALLER_BYTES
    except UnicodeEncodeError:
        return False


def caller_index_keys(record: RunRecord) -> dict[str, str]:
    """The META item's keys in the caller index (none for a run without a caller)."""
    if record.caller is None:
        return {}
    return {
        CALLER_INDEX_PK: f"{RUNS_OF_CALLER}{record.caller}",
        CALLER_INDEX_SK: f"{record.created_at}#{record.run_id}",
    }


def check_cursor(start: Cursor | None, caller: str | None) -> None:
    """A cursor must be exactly the keys of an item in the listing it continues: a run record in
    the caller's index partition, or (every run) an item of a run in the table. Anything else is refused, so a
    forged cursor can neither fail deep in DynamoDB nor point into another caller's runs."""
    if start is None:
        return
    wanted = {"pk", "sk", *(_INDEX_KEYS if caller is not None else ())}
    if (
        not isinstance(start, dict)
        or set(start) != wanted
        or not all(
            isinstance(v, str) and 0 < len(v.encode(errors="replace")) <= PARTITION_KEY_MAX_BYTES
            for v in start.values()
        )
        # The caller's listing resumes at a run record; the admin's scan of the table resumes
        # wherever its last read stopped, usually a message of some run.
        or (caller is not None and start["sk"] != "META")
        or not start["pk"].startswith("RUN#" if caller is not None else SCANNED_PARTITIONS)
        or (caller is not None and start[CALLER_INDEX_PK] != f"{RUNS_OF_CALLER}{caller}")
        or (caller is not None and not start[CALLER_INDEX_SK].endswith("#" + start["pk"][4:]))
    ):
        raise InvalidCursorError()


def _cancellation_codes(error: ClientError) -> list[str]:
    """A cancelled transaction's reason codes, one per item in request order ("None": no reason)."""
    response: dict[str, Any] = dict(error.response)
    return [str(reason.get("Code")) for reason in response.get("CancellationReasons") or []]


def _summary(item: dict[str, Any]) -> RunSummary:
    parent = item.get("parent")
    return RunSummary(
        run_id=str(item["run_id"]),
        agent=str(item["agent"]),
        status=RunStatus(str(item["status"])),
        caller=item.get("caller"),
        created_at=str(item["created_at"]),
        metadata=item.get("metadata"),
        parent_run_id=str(parent["run_id"]) if isinstance(parent, dict) else None,
    )


def _pk(run_id: str) -> str:
    return f"RUN#{run_id}"


def _msg_sk(seq: int) -> str:
    return f"{MSG_PREFIX}{seq:06d}"


def _quota_pk(caller: str) -> str:
    return f"{QUOTAS_OF_CALLER}{caller}"


def _call_sk(seq: int) -> str:
    return f"CALL#{seq:06d}"


class HistoryPrefixCache:
    """Per run, the items of every slot up to the first empty one, for the runs used last.

    History items are written once and never change, but not in slot order: a reply at slot
    n reserves n+1..n+k for its calls' results, written as each worker finishes. Only the
    contiguous prefix is safe to keep; everything after it is read again, so a result that
    lands in an earlier gap is seen on the next load.
    """

    def __init__(self, max_runs: int = HISTORY_CACHE_RUNS) -> None:
        self._max_runs = max_runs
        self._runs: OrderedDict[str, tuple[HistoryItem, ...]] = OrderedDict()
        self._lock = threading.Lock()  # the local runtime runs several steps in one process

    def prefix(self, run_id: str) -> tuple[HistoryItem, ...]:
        """The cached items of slots 1..n with none missing (empty if none are cached)."""
        with self._lock:
            items = self._runs.get(run_id, ())
            if items:
                self._runs.move_to_end(run_id)
            return items

    def extend(self, run_id: str, known: tuple[HistoryItem, ...], read: list[HistoryItem]) -> None:
        """Keep `known` plus the items of `read` that continue it without a gap."""
        if self._max_runs <= 0:
            return
        added: list[HistoryItem] = []
        for item in read:
            if item.seq != len(known) + len(added) + 1:
                break  # a reserved slot not written yet: nothing past it is kept
            added.append(item)
        if not added:
            return
        prefix = known + tuple(added)
        with self._lock:
            # Another thread may have cached a longer prefix of the same run meanwhile.
            if len(self._runs.get(run_id, ())) < len(prefix):
                self._runs[run_id] = prefix
            self._runs.move_to_end(run_id)
            while len(self._runs) > self._max_runs:
                self._runs.popitem(last=False)


def bounded(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text)} characters in all]"


class DynamoHistoryStore:
    """Every port of `shared.history.ports` on one table and one bucket."""

    def __init__(
        self,
        table: "Table",
        s3: "S3Client",
        bucket: str,
        inline_limit: int = 100_000,
        history_cache_runs: int = HISTORY_CACHE_RUNS,
        retention_days: int = retention.DEFAULT_RETENTION_DAYS,
    ) -> None:
        self._table = table
        self._s3 = s3
        self._bucket = bucket
        self._inline_limit = inline_limit
        self._retention_days = retention_days
        self._history_cache = HistoryPrefixCache(history_cache_runs)

    # --- run record -----------------------------------------------------------------------

    def create_run(self, record: RunRecord, first: HistoryItem, admission: Admission | None = None) -> bool:
        """Write the run record and its first message together; False if the run exists. With
        an `admission`, the quota counters are conditions of the same transaction: a start is
        counted exactly when its run is created (`QuotaExceededError` when one is full)."""
        counted = admission is not None and admission.running is not None
        meta = {
            "pk": _pk(record.run_id),
            "sk": "META",
            **record.model_dump(mode="json", exclude={"usage", "tree_usage"}),
            **caller_index_keys(record),
            **dict.fromkeys(_USAGE, 0),
            **dict.fromkeys(_TREE, 0),
            **({HOLDS_SLOT: True} if counted else {}),
        }
        meta = {k: v for k, v in meta.items() if v is not None}
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._table.name,
                    "Item": meta,
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Put": {
                    "TableName": self._table.name,
                    "Item": self._message_item(record.run_id, first),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ]
        quotas = [] if admission is None else self._quota_updates(record.run_id, admission)
        items += [update for _, update in quotas]
        try:
            self._transact_counted(items, contended=bool(quotas))
        except ClientError as e:
            if not lost_race(e):
                raise
            reasons = _cancellation_codes(e)
            # The run exists (a retry, a duplicate event): that alone, never a quota, answers it.
            if not reasons or reasons[0] == "ConditionalCheckFailed" or admission is None:
                return False
            for (quota, _), reason in zip(quotas, reasons[2:], strict=True):
                if reason == "ConditionalCheckFailed":
                    limit = getattr(admission, quota)
                    raise QuotaExceededError(quota, limit, admission.retry_after[quota]) from e
            return False
        return True

    def _transact_counted(self, items: list[dict[str, Any]], contended: bool) -> None:
        """One transaction; one that counts a start is tried again when it met another on the same
        counter (`TransactionConflict`: one caller's starts at once), as it was refused, not applied."""
        client = self._table.meta.client
        for delay in (0.02, 0.05, 0.1, 0.2, None) if contended else (None,):
            try:
                client.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
                return
            except ClientError as e:
                conflicted = "TransactionConflict" in _cancellation_codes(e)
                if delay is None or not conflicted or lost_race(e):
                    raise
                time.sleep(delay * (0.5 + random.random()))

    def _quota_updates(self, run_id: str, admission: Admission) -> list[tuple[str, dict[str, Any]]]:
        """The transaction items counting one start: (quota, item), for each quota that is on."""
        pk = _quota_pk(admission.caller)
        updates: list[tuple[str, dict[str, Any]]] = []
        if admission.starts_per_minute is not None:
            update = {
                "TableName": self._table.name,
                "Key": {"pk": pk, "sk": f"MINUTE#{admission.window}"},
                "UpdateExpression": "ADD #n :one SET #expires = :expires",
                "ConditionExpression": "attribute_not_exists(#n) OR #n < :limit",
                "ExpressionAttributeNames": {"#n": "started", "#expires": retention.RETAIN_UNTIL},
                "ExpressionAttributeValues": {
                    ":one": 1,
                    ":limit": admission.starts_per_minute,
                    ":expires": admission.window_expires_at,
                },
            }
            updates.append(("starts_per_minute", {"Update": update}))
        if admission.running is not None:
            update = {
                "TableName": self._table.name,
                "Key": {"pk": pk, "sk": RUNNING_SLOTS_SK},
                # A set of run ids, not a number: giving a slot back twice, or a run that never
                # held one, changes nothing.
                "UpdateExpression": "ADD #runs :run",
                "ConditionExpression": "attribute_not_exists(#runs) OR size(#runs) < :limit",
                "ExpressionAttributeNames": {"#runs": "runs"},
                "ExpressionAttributeValues": {":run": {run_id}, ":limit": admission.running},
            }
            updates.append(("running", {"Update": update}))
        return updates

    def running_slots(self, caller: str) -> list[str]:
        item = self._table.get_item(
            Key={"pk": _quota_pk(caller), "sk": RUNNING_SLOTS_SK}, ConsistentRead=True
        ).get("Item", {})
        runs = item.get("runs") or set()
        return sorted(str(run_id) for run_id in runs)  # type: ignore[union-attr]

    def release_slots(self, caller: str, run_ids: list[str]) -> None:
        if not run_ids:
            return
        self._table.update_item(
            Key={"pk": _quota_pk(caller), "sk": RUNNING_SLOTS_SK},
            UpdateExpression="DELETE #runs :runs",
            ExpressionAttributeNames={"#runs": "runs"},
            ExpressionAttributeValues={":runs": set(run_ids)},
        )

    def get_runs(self, run_ids: list[str]) -> dict[str, RunRecord]:
        client: Any = self._table.meta.client
        found: dict[str, RunRecord] = {}
        for start in range(0, len(run_ids), 100):  # BatchGetItem reads 100 keys a request
            keys = [{"pk": _pk(run_id), "sk": "META"} for run_id in run_ids[start : start + 100]]
            for delay in (0.05, 0.1, 0.2, 0.4, 0.8, None):
                answer = client.batch_get_item(
                    RequestItems={self._table.name: {"Keys": keys, "ConsistentRead": True}}
                )
                for row in answer["Responses"].get(self._table.name, []):
                    run_id = str(row["pk"]).removeprefix("RUN#")
                    found[run_id] = self._record(run_id, row)
                keys = answer.get("UnprocessedKeys", {}).get(self._table.name, {}).get("Keys", [])
                if not keys:
                    break
                if delay is None:
                    raise RuntimeError(f"DynamoDB left {len(keys)} run records unread")
                time.sleep(delay)
        return found

    def get_run(self, run_id: str) -> RunRecord:
        item = self._table.get_item(Key={"pk": _pk(run_id), "sk": "META"}, ConsistentRead=True).get("Item")
        if item is None:
            raise RunNotFoundError(run_id)
        return self._record(run_id, item)

    def load_call(self, run_id: str, reply_seq: int, seq: int) -> CallRead:
        # One request for what three reads fetched: a tool call's delivery starts with these.
        wanted: dict[str, dict[str, Any] | None] = {
            "META": None,
            _msg_sk(reply_seq): None,
            _msg_sk(seq): None,
            # The approval gate of a call that needed one: the worker checks what was approved.
            f"GATE#{seq:06d}": None,
        }
        keys: list[dict[str, Any]] = [{"pk": _pk(run_id), "sk": sk} for sk in wanted]
        # The table resource's client takes and gives plain Python values (boto3's transformer).
        client: Any = self._table.meta.client
        for delay in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, None):
            answer = client.batch_get_item(
                RequestItems={self._table.name: {"Keys": keys, "ConsistentRead": True}}
            )
            for row in answer["Responses"].get(self._table.name, []):
                wanted[str(row["sk"])] = row
            keys = answer.get("UnprocessedKeys", {}).get(self._table.name, {}).get("Keys", [])
            if not keys:
                break
            if delay is None:  # throttled past every retry: as any other read that fails
                raise RuntimeError(f"DynamoDB left {len(keys)} keys of run {run_id} unread")
            time.sleep(delay)
        meta = wanted["META"]
        if meta is None:
            raise RunNotFoundError(run_id)
        reply, result = wanted[_msg_sk(reply_seq)], wanted[_msg_sk(seq)]
        return CallRead(
            run=self._record(run_id, meta),
            reply=None if reply is None else self._load(reply),
            result=None if result is None else self._load(result),
            gate=wanted[f"GATE#{seq:06d}"],
        )

    def _record(self, run_id: str, item: dict[str, Any]) -> RunRecord:
        data = {
            k: _plain(v) for k, v in item.items() if k not in ("pk", "sk", *_INDEX_KEYS) and k not in _TREE
        }
        data["usage"] = Usage(**{name: data.pop(name, 0) for name in _USAGE})
        if data.get("root_run_id") in (None, run_id):
            # The tree's totals share the root's item: read with it, they cost no request of their own.
            data["tree_usage"] = _tree_of(item)
        return RunRecord.model_validate(data)

    def record_model_call(
        self, run_id: str, turn: int, used: Usage, root_run_id: str | None = None
    ) -> Usage | None:
        own = used.model_dump()
        root = root_run_id or run_id
        # Counted once per turn: a retried step records the same turn again, and is refused.
        try:
            counted = self._add(run_id, own, {"turn": turn}, first_of_turn=turn)
        except ClientError as e:
            if lost_race(e):
                return None
            raise
        if root != run_id:
            counted = self._add(root, {f"tree_{name}": value for name, value in own.items()}, {})
        return _tree_of(counted)

    def _add(
        self, run_id: str, counters: dict[str, int], values: dict[str, Any], first_of_turn: int | None = None
    ) -> dict[str, Any]:
        """Add the counters and set the values; the item as it is after, as one atomic read."""
        names = {f"#{name}": name for name in (*counters, *values, "updated_at")}
        condition: dict[str, Any] = {}
        if first_of_turn is not None:
            names["#turn"] = "turn"
            condition = {"ConditionExpression": "attribute_not_exists(#turn) OR #turn < :first_of_turn"}
        return self._table.update_item(
            Key={"pk": _pk(run_id), "sk": "META"},
            UpdateExpression="ADD "
            + ", ".join(f"#{name} :{name}" for name in counters)
            + " SET "
            + ", ".join(f"#{name} = :{name}" for name in (*values, "updated_at")),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues={
                **{f":{name}": value for name, value in counters.items()},
                **{f":{name}": value for name, value in values.items()},
                ":updated_at": utc_now(),
                **({":first_of_turn": first_of_turn} if first_of_turn is not None else {}),
            },
            ReturnValues="ALL_NEW",
            **condition,
        )["Attributes"]

    def tree_usage(self, root_run_id: str) -> Usage:
        item = self._table.get_item(
            Key={"pk": _pk(root_run_id), "sk": "META"},
            ConsistentRead=True,
            ProjectionExpression=", ".join((*_USAGE, *_TREE)),
        ).get("Item", {})
        return _tree_of(item)

    def finish_run(
        self, run_id: str, status: RunStatus, output: str | None = None, error: str | None = None
    ) -> bool:
        changes: dict[str, Any] = {
            "status": status.value,
            "updated_at": utc_now(),
            "output": output,
            "error": bounded(error, ERROR_MAX_CHARS),
            # The record's own expiry, written with the ending; the rest is stamped below.
            retention.RETAIN_UNTIL: retention.retain_until(self._retention_days),
        }
        if output is not None and len(output) > OUTPUT_INLINE_CHARS:
            # Answers of any size: the record keeps the beginning, S3 the whole (items stop at 400 KB).
            key = f"runs/{run_id}/output.txt"
            self._s3.put_object(Bucket=self._bucket, Key=key, Body=output.encode(), ContentType="text/plain")
            changes |= {
                "output": output[:OUTPUT_INLINE_CHARS],
                "output_ref": key,
                "output_chars": len(output),
            }
        changes = {name: value for name, value in changes.items() if value is not None}
        # status, output and error are DynamoDB reserved words: every name goes through "#".
        try:
            before = self._table.update_item(
                Key={"pk": _pk(run_id), "sk": "META"},
                UpdateExpression="SET " + ", ".join(f"#{name} = :{name}" for name in changes),
                # A run ends once: a retried step must not overwrite the first ending.
                ConditionExpression="#status = :running",
                ExpressionAttributeNames={f"#{name}": name for name in changes},
                ExpressionAttributeValues={
                    **{f":{name}": value for name, value in changes.items()},
                    ":running": RunStatus.RUNNING.value,
                },
                ReturnValues="ALL_OLD",
            ).get("Attributes", {})
        except ClientError as e:
            if not lost_race(e):
                raise
            # Ended already: by a writer that may have died before stamping the rest. Stamped
            # items are not written again, so this costs a read when all is done.
            self.expire_ended(run_id)
            return False
        retention.expire_run(self._table, self._s3, self._bucket, run_id, changes[retention.RETAIN_UNTIL])
        # Only the ending that changed the status gets here. A crash before this write leaves the
        # slot held by an ended run: the caller's next start at its limit gives it back
        # (shared/runs/quota.py `RunQuota.repair`).
        if before.get(HOLDS_SLOT) and before.get("caller"):
            self.release_slots(str(before["caller"]), [run_id])
        return True

    def expire_ended(self, run_id: str) -> None:
        """Give an ended run's items and objects the expiry its record holds (nothing for a
        running run)."""
        exists, until = retention.ended_stamp(self._table, run_id)
        if exists and until is not None:
            retention.expire_run(self._table, self._s3, self._bucket, run_id, until)

    def delete_run(self, run_id: str) -> None:
        """Remove the run's items and objects now, its record last (`retention.delete_run`)."""
        retention.delete_run(self._table, self._s3, self._bucket, run_id)

    def _after_write(self, run_id: str, keys: list[dict[str, Any]], objects: list[str]) -> None:
        retention.after_write(
            self._table, self._s3, self._bucket, run_id, (keys, objects), self._retention_days
        )

    def set_execution(self, run_id: str, execution: int, start_turn: int) -> None:
        self._table.update_item(
            Key={"pk": _pk(run_id), "sk": "META"},
            UpdateExpression="SET #execution = :n, execution_start_turn = :t",
            ExpressionAttributeNames={"#execution": "execution"},
            ExpressionAttributeValues={":n": execution, ":t": start_turn},
        )

    def record_handoffs(self, run_id: str, handoffs: list[HandoffRecord], active: str, known: int) -> bool:
        listed = "size(handoffs) = :known"
        if known == 0:
            listed = f"(attribute_not_exists(handoffs) OR {listed})"
        try:
            self._table.update_item(
                Key={"pk": _pk(run_id), "sk": "META"},
                UpdateExpression="SET active_agent = :active, handoffs = :handoffs, updated_at = :now",
                ConditionExpression=f"#status = :running AND {listed}",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":active": active,
                    ":handoffs": [h.model_dump() for h in handoffs],
                    ":known": known,
                    ":running": RunStatus.RUNNING.value,
                    ":now": utc_now(),
                },
            )
        except ClientError as e:
            if not lost_race(e):
                raise
            return False
        return True

    def list_runs(
        self,
        caller: str | None,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        limit: int = 100,
        start: Cursor | None = None,
    ) -> tuple[list[RunSummary], Cursor | None]:
        check_cursor(start, caller)
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        filters: list[str] = []
        for name, value in (("status", status.value if status else None), ("agent", agent)):
            if value is not None:
                names[f"#{name}"], values[f":{name}"] = name, value
                filters.append(f"#{name} = :{name}")
        kwargs: dict[str, Any] = {}
        operation: Callable[..., Any]
        keys: tuple[str, ...]
        if caller is None:
            # The admin's "every run": a scan for the META items (rare, and unordered).
            filters.insert(0, "sk = :meta")
            values[":meta"] = "META"
            read, keys, operation = SCAN_READ_ITEMS, ("pk", "sk"), self._table.scan
        else:
            kwargs = {
                "IndexName": CALLER_INDEX,
                "KeyConditionExpression": f"{CALLER_INDEX_PK} = :caller",
                "ScanIndexForward": False,  # newest first
            }
            values[":caller"] = f"{RUNS_OF_CALLER}{caller}"
            read = limit if not filters else limit * LIST_READ_FACTOR
            keys, operation = ("pk", "sk", *_INDEX_KEYS), self._table.query
        if filters:
            kwargs["FilterExpression"] = " AND ".join(filters)
        if names:
            kwargs["ExpressionAttributeNames"] = names
        kwargs["ExpressionAttributeValues"] = values
        found: list[RunSummary] = []
        evaluated, key = 0, dict[str, Any](start) if start else None
        while True:
            request = {**kwargs, "Limit": read}
            if key:
                request["ExclusiveStartKey"] = key
            page = operation(**request)
            evaluated += page.get("ScannedCount", 0)
            items = page.get("Items", [])
            for index, item in enumerate(items):
                found.append(_summary({k: _plain(v) for k, v in item.items()}))
                if len(found) == limit:
                    more = index < len(items) - 1 or "LastEvaluatedKey" in page
                    return found, {k: str(item[k]) for k in keys} if more else None
            key = page.get("LastEvaluatedKey")
            if key is None:
                return found, None
            if evaluated >= max(read, limit * LIST_READ_FACTOR):
                return found, {k: str(v) for k, v in key.items()}

    # --- messages -------------------------------------------------------------------------

    def _message_item(self, run_id: str, item: HistoryItem) -> dict[str, Any]:
        data = HISTORY_ITEM.dump_json(item).decode()
        row: dict[str, Any] = {"pk": _pk(run_id), "sk": _msg_sk(item.seq), "kind": item.kind}
        if len(data.encode()) > self._inline_limit:
            key = f"runs/{run_id}/messages/{item.seq:06d}.json"
            self._s3.put_object(
                Bucket=self._bucket, Key=key, Body=data.encode(), ContentType="application/json"
            )
            row["data_ref"] = key
        else:
            row["data"] = data
        return row

    def _load(self, row: dict[str, Any]) -> HistoryItem:
        if "data_ref" in row:
            body = self._s3.get_object(Bucket=self._bucket, Key=str(row["data_ref"]))["Body"].read()
            return HISTORY_ITEM.validate_json(body)
        return HISTORY_ITEM.validate_json(str(row["data"]))

    def append(self, run_id: str, item: HistoryItem) -> bool:
        """Append at `item.seq`; False if that slot is taken (a retry or duplicate delivery)."""
        row = self._message_item(run_id, item)
        try:
            self._table.put_item(Item=row, ConditionExpression="attribute_not_exists(pk)")
        except ClientError as e:
            if lost_race(e):
                return False
            raise
        # A model step may append after a cancel ended the run: the ending's stamping missed it.
        self._after_write(run_id, [{"pk": row["pk"], "sk": row["sk"]}], _objects(row))
        return True

    def get_item(self, run_id: str, seq: int) -> HistoryItem | None:
        row = self._table.get_item(Key={"pk": _pk(run_id), "sk": _msg_sk(seq)}, ConsistentRead=True).get(
            "Item"
        )
        return None if row is None else self._load(row)

    def load_history(self, run_id: str) -> list[HistoryItem]:
        """Every item, in slot order. Reads only the slots after the cached prefix: a step
        costs O(new items) of DynamoDB reads, not O(history)."""
        known = self._history_cache.prefix(run_id)
        read = list(self.iter_history(run_id, after=len(known), page_size=None))
        self._history_cache.extend(run_id, known, read)
        return [*known, *read]

    # --- the task token a child run answers -----------------------------------------------

    def put_parent_token(self, run_id: str, token: str) -> None:
        # Kept apart from the run record, which the API returns: a token is a bearer credential.
        self._table.put_item(Item={"pk": _pk(run_id), "sk": "PARENT_TOKEN", "token": token})

    def get_parent_token(self, run_id: str) -> str | None:
        row = self._table.get_item(Key={"pk": _pk(run_id), "sk": "PARENT_TOKEN"}, ConsistentRead=True).get(
            "Item"
        )
        return None if row is None else str(row["token"])

    # --- whole tool results kept out of the model's context --------------------------------

    def put_result(self, run_id: str, seq: int, content: str) -> str:
        key = f"runs/{run_id}/results/{seq:06d}.txt"
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=content.encode(), ContentType="text/plain")
        return key

    def get_result(self, key: str) -> str:
        return self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read().decode()

    # --- per-run state tools share (ToolContext.state) ---------------------------------------

    def load_state(self, run_id: str) -> dict[str, Any]:
        row = self._table.get_item(Key={"pk": _pk(run_id), "sk": "STATE"}, ConsistentRead=True).get(
            "Item", {}
        )
        return {name[2:]: json.loads(str(value)) for name, value in row.items() if name.startswith("s_")}

    @staticmethod
    def _state_update(changed: dict[str, Any], removed: list[str]) -> dict[str, Any]:
        """One attribute per key, values as JSON text: parallel calls writing different keys
        do not overwrite each other, and numbers keep their type (no Decimal)."""
        names = {f"#k{i}": f"s_{key}" for i, key in enumerate(changed)}
        names |= {f"#r{i}": f"s_{key}" for i, key in enumerate(removed)}
        expression = ""
        if changed:
            expression += "SET " + ", ".join(f"#k{i} = :v{i}" for i in range(len(changed)))
        if removed:
            expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(removed)))
        update: dict[str, Any] = {"UpdateExpression": expression.strip(), "ExpressionAttributeNames": names}
        if changed:
            update["ExpressionAttributeValues"] = {
                f":v{i}": json.dumps(value) for i, value in enumerate(changed.values())
            }
        return update

    # --- the tool-call ledger: CLAIMED -> DONE, keyed by history slot ------------------------

    def claim_call(self, run_id: str, seq: int, lease_seconds: int) -> Claim:
        """Claim the call for this delivery (see `CallLedger`).

        Keyed by the call's history slot, never the model's call id: models and compatible
        servers repeat, reuse and omit ids.
        """
        key = {"pk": _pk(run_id), "sk": _call_sk(seq)}
        owner, now = uuid.uuid4().hex, time.time()
        try:
            self._table.put_item(
                Item={
                    **key,
                    "state": "CLAIMED",
                    "owner": owner,
                    "lease_until": Decimal(str(now + lease_seconds)),
                    "attempt": 1,
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
            return Claim(ClaimState.NEW, owner, 1)
        except ClientError as e:
            if not lost_race(e):
                raise
        row = self._table.get_item(Key=key, ConsistentRead=True).get("Item", {})
        if row.get("state") == "DONE":
            return Claim(ClaimState.DONE)
        if float(_plain(row.get("lease_until", 0))) >= now:
            return Claim(ClaimState.BUSY)
        attempt = int(_plain(row.get("attempt", 1))) + 1
        try:
            # Conditional on the claim we read: two redeliveries cannot both take it over.
            self._table.update_item(
                Key=key,
                UpdateExpression="SET #owner = :owner, lease_until = :lease, attempt = :attempt",
                ConditionExpression="#owner = :previous AND #state = :claimed",
                ExpressionAttributeNames={"#owner": "owner", "#state": "state"},
                ExpressionAttributeValues={
                    ":owner": owner,
                    ":lease": Decimal(str(now + lease_seconds)),
                    ":attempt": attempt,
                    ":previous": row.get("owner", ""),
                    ":claimed": "CLAIMED",
                },
            )
        except ClientError as e:
            if lost_race(e):
                return Claim(ClaimState.BUSY)
            raise
        return Claim(ClaimState.TAKEN_OVER, owner, attempt)

    def complete_call(
        self,
        run_id: str,
        result: ToolResult,
        owner: str,
        state_changes: tuple[dict[str, Any], list[str]] = ({}, []),
    ) -> bool:
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._table.name,
                    "Item": self._message_item(run_id, result),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Update": {
                    "TableName": self._table.name,
                    "Key": {"pk": _pk(run_id), "sk": _call_sk(result.seq)},
                    "UpdateExpression": "SET #state = :done",
                    "ConditionExpression": "#owner = :owner",
                    "ExpressionAttributeNames": {"#state": "state", "#owner": "owner"},
                    "ExpressionAttributeValues": {":done": "DONE", ":owner": owner},
                }
            },
        ]
        changed, removed = state_changes
        if changed or removed:
            items.append(
                {
                    "Update": {
                        "TableName": self._table.name,
                        "Key": {"pk": _pk(run_id), "sk": "STATE"},
                        **self._state_update(changed, removed),
                    }
                }
            )
        try:
            self._table.meta.client.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        except ClientError as e:
            if lost_race(e):
                return False
            raise
        # A call still running when its run was cancelled stores its result after the ending.
        row = items[0]["Put"]["Item"]
        keys = [{"pk": _pk(run_id), "sk": sk} for sk in (row["sk"], _call_sk(result.seq), "STATE")]
        self._after_write(run_id, keys, _objects(row))
        return True

    def release_call(self, run_id: str, seq: int, owner: str) -> None:
        try:
            self._table.delete_item(
                Key={"pk": _pk(run_id), "sk": _call_sk(seq)},
                ConditionExpression="#owner = :owner AND #state = :claimed",
                ExpressionAttributeNames={"#owner": "owner", "#state": "state"},
                ExpressionAttributeValues={":owner": owner, ":claimed": "CLAIMED"},
            )
        except ClientError as e:
            if not lost_race(e):
                raise

    # --- reading a run page by page (the runs API) -----------------------------------------

    def iter_history(self, run_id: str, after: int = 0, page_size: int | None = 100) -> Iterator[HistoryItem]:
        """The items after `after`, in order, each read (from S3 too) only when the caller
        asks for it: a page stops early without loading what it will not show."""
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :first AND :last",
            "ExpressionAttributeValues": {
                ":pk": _pk(run_id),
                ":first": _msg_sk(after + 1),
                ":last": _msg_sk(999_999),
            },
            "ConsistentRead": True,
        }
        if page_size is not None:
            kwargs["Limit"] = page_size
        while True:
            page = self._table.query(**kwargs)
            for row in page.get("Items", []):
                yield self._load(row)
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def stored_message_key(self, run_id: str, seq: int) -> str | None:
        """The S3 key of an item too large for DynamoDB; None if it is stored inline or absent."""
        row = self._table.get_item(
            Key={"pk": _pk(run_id), "sk": _msg_sk(seq)}, ProjectionExpression="data_ref", ConsistentRead=True
        ).get("Item")
        return None if row is None or "data_ref" not in row else str(row["data_ref"])


def _objects(row: dict[str, Any]) -> list[str]:
    return [str(row["data_ref"])] if "data_ref" in row else []


def _plain(value: Any) -> Any:
    """DynamoDB numbers come back as Decimal, at any depth (the run's parent link is a map)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _tree_of(root: dict[str, Any]) -> Usage:
    """A root run's tree totals: its own usage and its descendants'."""
    return Usage(
        **{name: int(_plain(root.get(name, 0))) + int(_plain(root.get(f"tree_{name}", 0))) for name in _USAGE}
    )
