"""Every port of `shared.history.ports` on one DynamoDB table and one S3 bucket, as one object.

Each part lives in its own module: run records, quotas and listing (`run_records.py`), the
history itself (`history_items.py`), the tool-call ledger and the state tools share
(`ledger.py`), what the run's operations cost (`costs.py`), over what they share (`table.py`); the keys are `shared/dynamo.py`'s.
"""

from typing import TYPE_CHECKING

from toolpipe.shared.history import retention
from toolpipe.shared.history.costs import RunCostStore
from toolpipe.shared.history.history_items import HISTORY_CACHE_RUNS, HistoryItemStore, HistoryPrefixCache
from toolpipe.shared.history.ledger import CallLedgerStore
from toolpipe.shared.history.ports import Appended, reply_usage
from toolpipe.shared.history.run_records import RunRecordStore
from toolpipe.shared.messages import AssistantMessage

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table
    from mypy_boto3_s3.client import S3Client


class DynamoHistoryStore(RunRecordStore, HistoryItemStore, CallLedgerStore, RunCostStore):
    """The history store the functions use."""

    def __init__(
        self,
        table: "Table",
        s3: "S3Client",
        bucket: str,
        inline_limit: int = 100_000,
        history_cache_runs: int = HISTORY_CACHE_RUNS,
        retention_days: int = retention.DEFAULT_RETENTION_DAYS,
    ) -> None:
        super().__init__(table, s3, bucket, inline_limit, retention_days)
        self._history_cache = HistoryPrefixCache(history_cache_runs)

    def append_reply(self, run_id: str, reply: AssistantMessage, root_run_id: str | None = None) -> Appended:
        # The count's answer stands for the read of the record an append makes after it.
        written = self._put_message(run_id, reply)
        if written is None:
            return Appended(False, None)
        return Appended(
            True, self._count_model_call(run_id, reply.turn, reply_usage(reply), root_run_id, written)
        )
