"""Run records on the run table: create (with the caller's quotas, in one transaction), read,
count usage, end, expire, delete and list runs; the running slots of a caller's quota; the task
token a child run answers. Keys: `shared/dynamo.py`.
"""

import json
import random
import time
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from toolpipe.shared.dynamo import (
    CALLER_INDEX,
    CALLER_INDEX_PK,
    CALLER_INDEX_SK,
    CONDITION_FALSE,
    INDEX_KEYS,
    META_SK,
    PARENT_TOKEN_SK,
    PARTITION_KEY_MAX_BYTES,
    RUN_PREFIX,
    RUNNING_SLOTS_SK,
    RUNS_OF_CALLER,
    SCANNED_PARTITIONS,
    cancellation_codes,
    lost_race,
    plain,
    quota_pk,
    run_id_of,
    run_pk,
)
from toolpipe.shared.history import retention
from toolpipe.shared.history.costs import cost_item
from toolpipe.shared.history.errors import InvalidCursorError, QuotaExceededError, RunNotFoundError
from toolpipe.shared.history.ports import (
    ERROR_MAX_CHARS,
    LIST_READ_FACTOR,
    OUTPUT_INLINE_CHARS,
    Admission,
    Cursor,
)
from toolpipe.shared.history.table import TREE_FIELDS, USAGE_FIELDS, RunTable, tree_of
from toolpipe.shared.messages import (
    HandoffRecord,
    HistoryItem,
    RunRecord,
    RunStatus,
    RunSummary,
    Usage,
    utc_now,
)

# The META attribute of a run that holds a running slot: its ending gives the slot back.
HOLDS_SLOT = "holds_slot"
# On a resumed run's record: the execution the resume started, while the expiry the run's ending
# gave its items and objects is still to be taken back (`keep_resumed`).
STAMPS_HELD = "stamps_held"
# A scan (the admin's listing of every run) reads this many items a request: most are messages.
SCAN_READ_ITEMS = 1000


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
    wanted = {"pk", "sk", *(INDEX_KEYS if caller is not None else ())}
    if (
        not isinstance(start, dict)
        or set(start) != wanted
        or not all(
            isinstance(v, str) and 0 < len(v.encode(errors="replace")) <= PARTITION_KEY_MAX_BYTES
            for v in start.values()
        )
        # The caller's listing resumes at a run record; the admin's scan of the table resumes
        # wherever its last read stopped, usually a message of some run.
        or (caller is not None and start["sk"] != META_SK)
        or not start["pk"].startswith(RUN_PREFIX if caller is not None else SCANNED_PARTITIONS)
        or (caller is not None and start[CALLER_INDEX_PK] != f"{RUNS_OF_CALLER}{caller}")
        or (caller is not None and not start[CALLER_INDEX_SK].endswith("#" + run_id_of(start["pk"])))
    ):
        raise InvalidCursorError()


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


def bounded(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text)} characters in all]"


class RunRecordStore(RunTable):
    """`RunRecords`, `RunningSlots` and `ParentTokens` on the run table."""

    def create_run(self, record: RunRecord, first: HistoryItem, admission: Admission | None = None) -> bool:
        """Write the run record and its first message together; False if the run exists. With
        an `admission`, the quota counters are conditions of the same transaction: a start is
        counted exactly when its run is created (`QuotaExceededError` when one is full)."""
        counted = admission is not None and admission.running is not None
        meta = {
            "pk": run_pk(record.run_id),
            "sk": META_SK,
            # `forks` is a string set, added to (`add_fork`), never written whole.
            **record.model_dump(mode="json", exclude={"usage", "tree_usage", "forks"}),
            **caller_index_keys(record),
            **dict.fromkeys(USAGE_FIELDS, 0),
            **dict.fromkeys(TREE_FIELDS, 0),
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
            # The run's cost counters (shared/history/costs.py): they exist exactly while the run does.
            {"Put": {"TableName": self._table.name, "Item": cost_item(record.run_id)}},
        ]
        quotas = [] if admission is None else self._quota_updates(record.run_id, admission)
        items += [update for _, update in quotas]
        try:
            self._transact_counted(items, contended=bool(quotas))
        except ClientError as e:
            if not lost_race(e):
                raise
            reasons = cancellation_codes(e)
            # The run exists (a retry, a duplicate event): that alone, never a quota, answers it.
            if not reasons or reasons[0] == CONDITION_FALSE or admission is None:
                return False
            for (quota, _), reason in zip(quotas, reasons[len(items) - len(quotas) :], strict=True):
                if reason == CONDITION_FALSE:
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
                conflicted = "TransactionConflict" in cancellation_codes(e)
                if delay is None or not conflicted or lost_race(e):
                    raise
                time.sleep(delay * (0.5 + random.random()))

    def _quota_updates(self, run_id: str, admission: Admission) -> list[tuple[str, dict[str, Any]]]:
        """The transaction items counting one start: (quota, item), for each quota that is on."""
        pk = quota_pk(admission.caller)
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
            Key={"pk": quota_pk(caller), "sk": RUNNING_SLOTS_SK}, ConsistentRead=True
        ).get("Item", {})
        runs = item.get("runs") or set()
        return sorted(str(run_id) for run_id in runs)  # type: ignore[union-attr]

    def release_slots(self, caller: str, run_ids: list[str]) -> None:
        # Each with a check that its run is not running, in one transaction: a resume between
        # an ending and its give-back took the slot again (`resume_run` adds the id), and a
        # plain DELETE would take it from the running run.
        for run_id in run_ids:
            try:
                self._transact_counted(
                    [
                        {
                            "Update": {
                                "TableName": self._table.name,
                                "Key": {"pk": quota_pk(caller), "sk": RUNNING_SLOTS_SK},
                                "UpdateExpression": "DELETE #runs :run",
                                "ExpressionAttributeNames": {"#runs": "runs"},
                                "ExpressionAttributeValues": {":run": {run_id}},
                            }
                        },
                        {
                            "ConditionCheck": {
                                "TableName": self._table.name,
                                "Key": {"pk": run_pk(run_id), "sk": META_SK},
                                "ConditionExpression": "attribute_not_exists(pk) OR #status <> :running",
                                "ExpressionAttributeNames": {"#status": "status"},
                                "ExpressionAttributeValues": {":running": RunStatus.RUNNING.value},
                            }
                        },
                    ],
                    contended=True,  # the caller's starts write the same item
                )
            except ClientError as e:
                if not lost_race(e):
                    raise

    def get_runs(self, run_ids: list[str]) -> dict[str, RunRecord]:
        client: Any = self._table.meta.client
        found: dict[str, RunRecord] = {}
        for start in range(0, len(run_ids), 100):  # BatchGetItem reads 100 keys a request
            keys = [{"pk": run_pk(run_id), "sk": META_SK} for run_id in run_ids[start : start + 100]]
            for delay in (0.05, 0.1, 0.2, 0.4, 0.8, None):
                answer = client.batch_get_item(
                    RequestItems={self._table.name: {"Keys": keys, "ConsistentRead": True}}
                )
                for row in answer["Responses"].get(self._table.name, []):
                    run_id = run_id_of(str(row["pk"]))
                    found[run_id] = self._record(run_id, row)
                keys = answer.get("UnprocessedKeys", {}).get(self._table.name, {}).get("Keys", [])
                if not keys:
                    break
                if delay is None:
                    raise RuntimeError(f"DynamoDB left {len(keys)} run records unread")
                time.sleep(delay)
        return found

    def get_run(self, run_id: str) -> RunRecord:
        item = self._table.get_item(Key={"pk": run_pk(run_id), "sk": META_SK}, ConsistentRead=True).get(
            "Item"
        )
        if item is None:
            raise RunNotFoundError(run_id)
        return self._record(run_id, item)

    def record_model_call(
        self, run_id: str, turn: int, used: Usage, root_run_id: str | None = None
    ) -> Usage | None:
        return self._count_model_call(run_id, turn, used, root_run_id)

    def _count_model_call(
        self,
        run_id: str,
        turn: int,
        used: Usage,
        root_run_id: str | None,
        written: tuple[list[dict[str, Any]], list[str]] | None = None,
    ) -> Usage | None:
        """`record_model_call`; with `written` (what the step wrote into the run just before),
        the count's answer also says whether the run ended or went meanwhile, which the write
        would otherwise read the record again to learn (`retention.after_write`)."""
        own = used.model_dump()
        root = root_run_id or run_id
        # Counted once per turn: a retried step records the same turn again, and is refused. So
        # is a count for a run deleted meanwhile (the model answered after a cancel and a delete).
        try:
            counted = self._add(run_id, own, {"turn": turn}, first_of_turn=turn)
        except ClientError as e:
            if not lost_race(e):
                raise
            if written is not None:
                was = e.response.get("Item")  # the record as it was; none when it is gone
                self._after_write(
                    run_id, *written, retention.record_state(was if isinstance(was, dict) else None)
                )
            return None
        if written is not None:
            self._after_write(run_id, *written, retention.record_state(counted))
        if root != run_id:
            try:
                counted = self._add(root, {f"tree_{name}": value for name, value in own.items()}, {})
            except ClientError as e:
                if lost_race(e):
                    return None  # the root was deleted meanwhile
                raise
        return tree_of(counted)

    def _add(
        self, run_id: str, counters: dict[str, int], values: dict[str, Any], first_of_turn: int | None = None
    ) -> dict[str, Any]:
        """Add the counters and set the values; the item as it is after, as one atomic read.
        Only to an existing record: an update makes the item it does not find, and a record
        made of counters alone has no status and no expiry."""
        names = {f"#{name}": name for name in (*counters, *values, "updated_at")}
        condition = "attribute_exists(pk)"
        if first_of_turn is not None:
            names["#turn"] = "turn"
            condition += " AND (attribute_not_exists(#turn) OR #turn < :first_of_turn)"
        return self._table.update_item(
            Key={"pk": run_pk(run_id), "sk": META_SK},
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
            ConditionExpression=condition,
            # A refusal says why: the record as it was (a turn counted), or none (deleted).
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )["Attributes"]

    def tree_usage(self, root_run_id: str) -> Usage:
        item = self._table.get_item(
            Key={"pk": run_pk(root_run_id), "sk": META_SK},
            ConsistentRead=True,
            ProjectionExpression=", ".join((*USAGE_FIELDS, *TREE_FIELDS)),
        ).get("Item", {})
        return tree_of(item)

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
                Key={"pk": run_pk(run_id), "sk": META_SK},
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

    def set_execution(self, run_id: str, execution: int, start_turn: int) -> bool:
        try:
            self._table.update_item(
                Key={"pk": run_pk(run_id), "sk": META_SK},
                UpdateExpression="SET #execution = :n, execution_start_turn = :t",
                # Not a run that ended, was deleted or was resumed since its step read it.
                ConditionExpression="#status = :running AND #execution = :read",
                ExpressionAttributeNames={"#execution": "execution", "#status": "status"},
                ExpressionAttributeValues={
                    ":n": execution,
                    ":t": start_turn,
                    ":running": RunStatus.RUNNING.value,
                    ":read": execution - 1,
                },
            )
        except ClientError as e:
            if lost_race(e):
                return False
            raise
        return True

    def resume_run(self, run: RunRecord, resumed: RunRecord, admission: Admission | None = None) -> bool:
        """Make the ended `run` running again as `resumed` (its next execution, limits, deadline
        and resumes), if it is still as read: False (nothing changed) when another writer got there
        first. The record's stamp goes in the same write, with a mark naming the resumed
        execution, whose steps take back the rest once (`keep_resumed`).
        With an `admission` whose running quota is on, the run takes a slot in the same
        transaction (`QuotaExceededError`, nothing changed, when the caller's are full)."""
        fields = (
            "status",
            "execution",
            "execution_start_turn",
            "limits",
            "deadline",
            "resumes",
            "updated_at",
        )
        # DynamoDB takes numbers as Decimal, never float (a limit in USD).
        values = json.loads(resumed.model_dump_json(include=set(fields)), parse_float=Decimal)
        values = {name: value for name, value in values.items() if value is not None}
        counted = admission is not None and admission.running is not None
        if counted:
            values[HOLDS_SLOT] = True  # the ending gives it back (`finish_run`)
        values[STAMPS_HELD] = resumed.execution  # taken back by the execution (`keep_resumed`)
        update = {
            "TableName": self._table.name,
            "Key": {"pk": run_pk(run.run_id), "sk": META_SK},
            "UpdateExpression": "SET "
            + ", ".join(f"#{name} = :{name}" for name in values)
            + f" REMOVE #error, #{retention.RETAIN_UNTIL}",
            "ConditionExpression": "#status = :was AND #execution = :was_execution",
            "ExpressionAttributeNames": {
                **{f"#{name}": name for name in [*values, "execution", "status"]},
                "#error": "error",
                f"#{retention.RETAIN_UNTIL}": retention.RETAIN_UNTIL,
            },
            "ExpressionAttributeValues": {
                **{f":{name}": value for name, value in values.items()},
                ":was": run.status.value,
                ":was_execution": run.execution,
            },
        }
        if admission is None or admission.running is None:
            try:
                client: Any = self._table.meta.client  # the same update, as a transaction item
                client.update_item(**update)
            except ClientError as e:
                if not lost_race(e):
                    raise
                return False
            return True
        # The record's write and the slot together: resumed exactly when it holds one.
        slot = self._quota_updates(run.run_id, replace(admission, starts_per_minute=None))
        try:
            self._transact_counted([{"Update": update}, *(item for _, item in slot)], contended=True)
        except ClientError as e:
            if not lost_race(e):
                raise
            reasons = cancellation_codes(e)
            [(quota, _)] = slot
            if len(reasons) > 1 and reasons[0] != CONDITION_FALSE and reasons[1] == CONDITION_FALSE:
                raise QuotaExceededError(quota, admission.running, admission.retry_after[quota]) from e
            return False
        return True

    def keep_resumed(self, run_id: str, execution: int) -> None:
        """Take back the expiry an ending gave the items and objects of a run that a resume into
        `execution` or before made run again (`retention.keep_run`), then the mark that says it
        is still to do: each only while the record still holds that mark and no stamp."""
        names = {"#r": retention.RETAIN_UNTIL, "#h": STAMPS_HELD}
        item = self._table.get_item(
            Key={"pk": run_pk(run_id), "sk": META_SK},
            ProjectionExpression="pk, #r, #h",
            ExpressionAttributeNames=names,
            ConsistentRead=True,
        ).get("Item")
        held = None if item is None or retention.RETAIN_UNTIL in item else item.get(STAMPS_HELD)
        # None: nothing to take back. Later than `execution`: a step of an execution before the
        # last resume's (an earlier one, or a restart's hand-over from it, counts on).
        if held is None or int(str(held)) > execution:
            return
        retention.keep_run(self._table, self._s3, self._bucket, run_id)
        try:
            self._table.update_item(
                Key={"pk": run_pk(run_id), "sk": META_SK},
                UpdateExpression="REMOVE #h",
                # Not once the run ended again, or another resume marked it for its own execution.
                ConditionExpression="attribute_not_exists(#r) AND #h = :held",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={":held": held},
            )
        except ClientError as e:
            if not lost_race(e):
                raise

    def add_fork(self, run_id: str, fork_id: str) -> None:
        """List `fork_id` among the run's forks; adding it again changes nothing (a set)."""
        self._table.update_item(
            Key={"pk": run_pk(run_id), "sk": META_SK},
            UpdateExpression="ADD forks :fork",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":fork": {fork_id}},
        )

    def record_handoffs(self, run_id: str, handoffs: list[HandoffRecord], active: str, known: int) -> bool:
        listed = "size(handoffs) = :known"
        if known == 0:
            listed = f"(attribute_not_exists(handoffs) OR {listed})"
        try:
            self._table.update_item(
                Key={"pk": run_pk(run_id), "sk": META_SK},
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
            keys, operation = ("pk", "sk", *INDEX_KEYS), self._table.query
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
                found.append(_summary({k: plain(v) for k, v in item.items()}))
                if len(found) == limit:
                    more = index < len(items) - 1 or "LastEvaluatedKey" in page
                    return found, {k: str(item[k]) for k in keys} if more else None
            key = page.get("LastEvaluatedKey")
            if key is None:
                return found, None
            if evaluated >= max(read, limit * LIST_READ_FACTOR):
                return found, {k: str(v) for k, v in key.items()}

    def put_parent_token(self, run_id: str, token: str) -> None:
        # Kept apart from the run record, which the API returns: a token is a bearer credential.
        self._table.put_item(Item={"pk": run_pk(run_id), "sk": PARENT_TOKEN_SK, "token": token})

    def get_parent_token(self, run_id: str) -> str | None:
        row = self._table.get_item(
            Key={"pk": run_pk(run_id), "sk": PARENT_TOKEN_SK}, ConsistentRead=True
        ).get("Item")
        return None if row is None else str(row["token"])
