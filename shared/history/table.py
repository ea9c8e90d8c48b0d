"""What every part of the DynamoDB history store works on: the run table and the bucket, how a
history item and a run record are stored, and the expiry of what is written after a run ended.

An item whose JSON would pass `inline_content_limit` is stored in S3 and the DynamoDB item keeps
a reference: items stop at 400 KB. When a run ends, all of it gets one expiry
(`shared/history/retention.py`).
"""

from typing import TYPE_CHECKING, Any

from toolpipe.shared.dynamo import INDEX_KEYS, message_sk, plain, run_pk
from toolpipe.shared.history import retention
from toolpipe.shared.messages import HISTORY_ITEM, HistoryItem, RunRecord, Usage

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table
    from mypy_boto3_s3.client import S3Client

USAGE_FIELDS = tuple(Usage.model_fields)
# A root run's record also counts what the runs below it used (its agent-tool runs, theirs...):
# its tree's totals are its own plus these. Kept apart so a root's own call adds its usage once.
TREE_FIELDS = tuple(f"tree_{name}" for name in USAGE_FIELDS)


class RunTable:
    """The table, the bucket and the settings the store's parts share."""

    def __init__(
        self,
        table: "Table",
        s3: "S3Client",
        bucket: str,
        inline_limit: int = 100_000,
        retention_days: int = retention.DEFAULT_RETENTION_DAYS,
    ) -> None:
        self._table = table
        self._s3 = s3
        self._bucket = bucket
        self._inline_limit = inline_limit
        self._retention_days = retention_days

    def _message_item(self, run_id: str, item: HistoryItem) -> dict[str, Any]:
        data = HISTORY_ITEM.dump_json(item).decode()
        row: dict[str, Any] = {"pk": run_pk(run_id), "sk": message_sk(item.seq), "kind": item.kind}
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

    def _record(self, run_id: str, item: dict[str, Any]) -> RunRecord:
        data = {
            k: plain(v)
            for k, v in item.items()
            if k not in ("pk", "sk", *INDEX_KEYS) and k not in TREE_FIELDS
        }
        data["usage"] = Usage(**{name: data.pop(name, 0) for name in USAGE_FIELDS})
        if data.get("root_run_id") in (None, run_id):
            # The tree's totals share the root's item: read with it, they cost no request of their own.
            data["tree_usage"] = tree_of(item)
        return RunRecord.model_validate(data)

    def _after_write(
        self,
        run_id: str,
        keys: list[dict[str, Any]],
        objects: list[str],
        record: tuple[bool, int | None] | None = None,
    ) -> None:
        retention.after_write(
            self._table, self._s3, self._bucket, run_id, (keys, objects), self._retention_days, record
        )


def objects_of(row: dict[str, Any]) -> list[str]:
    return [str(row["data_ref"])] if "data_ref" in row else []


def tree_of(root: dict[str, Any]) -> Usage:
    """A root run's tree totals: its own usage and its descendants'."""
    return Usage(
        **{
            name: int(plain(root.get(name, 0))) + int(plain(root.get(f"tree_{name}", 0)))
            for name in USAGE_FIELDS
        }
    )
