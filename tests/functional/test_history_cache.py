"""The history store keeps the contiguous prefix of a run's history and reads only what follows.

Deleting an item behind the store's back (something toolpipe never does: items are written
once) shows which items a load took from the cache and which it read from the table.
"""

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from toolpipe.infra.local.runtime import HISTORY_TABLE
from toolpipe.shared.history.store import DynamoHistoryStore
from toolpipe.shared.messages import HistoryItem, ToolResult, UserMessage


@pytest.fixture
def table() -> Iterator[Any]:
    with mock_aws():
        dynamodb = boto3.resource("dynamodb", region_name="us-east-1")
        table = dynamodb.create_table(TableName="history", **HISTORY_TABLE)
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="contents")
        yield table


def _store(table: Any, runs: int = 32) -> DynamoHistoryStore:
    return DynamoHistoryStore(
        table, boto3.client("s3", region_name="us-east-1"), "contents", history_cache_runs=runs
    )


def _item(seq: int) -> HistoryItem:
    if seq == 1:
        return UserMessage(seq=1, turn=0, content="hi")
    return ToolResult(seq=seq, turn=1, call_id=f"c{seq}", tool="t", content=f"r{seq}", status="ok")


def _vanish(table: Any, run_id: str, seq: int) -> None:
    table.delete_item(Key={"pk": f"RUN#{run_id}", "sk": f"MSG#{seq:06d}"})


def _seqs(store: DynamoHistoryStore, run_id: str) -> list[int]:
    return [item.seq for item in store.load_history(run_id)]


def test_a_result_written_into_an_earlier_gap_after_a_cached_read_is_seen(table: Any) -> None:
    store = _store(table)
    for seq in (1, 2, 4):  # slot 3 is reserved for a result still running
        assert store.append("r", _item(seq))
    assert _seqs(store, "r") == [1, 2, 4]
    assert store.append("r", _item(3))  # the slow worker finishes
    assert _seqs(store, "r") == [1, 2, 3, 4]


def test_items_up_to_the_first_gap_are_read_once_and_nothing_past_it_is_kept(table: Any) -> None:
    store = _store(table)
    for seq in (1, 2, 4):
        store.append("r", _item(seq))
    store.load_history("r")
    _vanish(table, "r", 2)  # inside the prefix: the next load does not read it again
    _vanish(table, "r", 4)  # past the gap: read again, so its absence shows
    assert _seqs(store, "r") == [1, 2]
    store.append("r", _item(3))
    store.append("r", _item(4))
    store.append("r", _item(5))
    assert _seqs(store, "r") == [1, 2, 3, 4, 5]  # new items after the prefix, in slot order
    _vanish(table, "r", 5)
    assert _seqs(store, "r") == [1, 2, 3, 4, 5]  # now all cached


def test_only_the_runs_used_last_are_kept(table: Any) -> None:
    store = _store(table, runs=2)
    for run_id in ("a", "b", "c"):
        store.append(run_id, _item(1))
        store.load_history(run_id)
    for run_id in ("a", "c"):
        _vanish(table, run_id, 1)
    assert _seqs(store, "a") == []  # evicted: read again
    assert _seqs(store, "c") == [1]  # kept


def test_a_store_without_a_cache_reads_everything_each_time(table: Any) -> None:
    store = _store(table, runs=0)
    store.append("r", _item(1))
    store.load_history("r")
    _vanish(table, "r", 1)
    assert _seqs(store, "r") == []
