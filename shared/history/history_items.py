"""A run's history on the run table: one item per message, appended at its slot, never
rewritten; read in slot order (the prefix a warm container has read is kept), page by page, or
one by one; whole tool results kept in S3 out of the model's context.
"""

import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError

from toolpipe.shared.dynamo import lost_race, message_sk, run_pk
from toolpipe.shared.history.table import RunTable, objects_of
from toolpipe.shared.messages import HistoryItem

# Runs whose history prefix a warm container keeps: an orchestrator container serves one step
# at a time, so a few runs cover the steps it serves back to back; the rest are read again.
HISTORY_CACHE_RUNS = 32


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


class HistoryItemStore(RunTable):
    """`History` and `Contents` on the run table and the bucket."""

    _history_cache: HistoryPrefixCache

    def append(self, run_id: str, item: HistoryItem) -> bool:
        """Append at `item.seq`; False if that slot is taken (a retry or duplicate delivery)."""
        written = self._put_message(run_id, item)
        if written is None:
            return False
        # A model step may append after a cancel ended the run: the ending's stamping missed it.
        self._after_write(run_id, *written)
        return True

    def _put_message(self, run_id: str, item: HistoryItem) -> tuple[list[dict[str, Any]], list[str]] | None:
        """Write the item at its slot, unless taken (None); what it wrote (item keys, object keys)."""
        row = self._message_item(run_id, item)
        try:
            self._table.put_item(Item=row, ConditionExpression="attribute_not_exists(pk)")
        except ClientError as e:
            if lost_race(e):
                return None
            raise
        return [{"pk": row["pk"], "sk": row["sk"]}], objects_of(row)

    def get_item(self, run_id: str, seq: int) -> HistoryItem | None:
        row = self._table.get_item(
            Key={"pk": run_pk(run_id), "sk": message_sk(seq)}, ConsistentRead=True
        ).get("Item")
        return None if row is None else self._load(row)

    def load_history(self, run_id: str) -> list[HistoryItem]:
        """Every item, in slot order. Reads only the slots after the cached prefix: a step
        costs O(new items) of DynamoDB reads, not O(history)."""
        known = self._history_cache.prefix(run_id)
        read = list(self.iter_history(run_id, after=len(known), page_size=None))
        self._history_cache.extend(run_id, known, read)
        return [*known, *read]

    def put_result(self, run_id: str, seq: int, content: str) -> str:
        key = f"runs/{run_id}/results/{seq:06d}.txt"
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=content.encode(), ContentType="text/plain")
        return key

    def get_result(self, key: str) -> str:
        return self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read().decode()

    def iter_history(self, run_id: str, after: int = 0, page_size: int | None = 100) -> Iterator[HistoryItem]:
        """The items after `after`, in order, each read (from S3 too) only when the caller
        asks for it: a page stops early without loading what it will not show."""
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :first AND :last",
            "ExpressionAttributeValues": {
                ":pk": run_pk(run_id),
                ":first": message_sk(after + 1),
                ":last": message_sk(999_999),
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
            Key={"pk": run_pk(run_id), "sk": message_sk(seq)},
            ProjectionExpression="data_ref",
            ConsistentRead=True,
        ).get("Item")
        return None if row is None or "data_ref" not in row else str(row["data_ref"])
