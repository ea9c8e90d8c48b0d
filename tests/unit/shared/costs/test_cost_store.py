"""The counters on DynamoDB (moto): added to concurrently, gone with the run, executions once."""

import threading

import boto3
from moto import mock_aws

from toolpipe.infra.local import serial
from toolpipe.shared.costs.operations import FunctionUse, Operations
from toolpipe.shared.history import DynamoHistoryStore
from toolpipe.shared.messages import RunRecord, UserMessage

TABLE = "runs"


def _store() -> DynamoHistoryStore:
    ddb = boto3.resource("dynamodb", region_name="us-east-1")
    ddb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="contents")
    store = DynamoHistoryStore(ddb.Table(TABLE), s3, "contents")
    record = RunRecord(run_id="r", agent="a", status="running", created_at="2026-01-01T00:00:00Z")
    assert store.create_run(record, UserMessage(seq=1, turn=0, content="hi"))
    return store


@mock_aws
def test_concurrent_invocations_never_lose_a_count() -> None:
    # DynamoDB applies each UpdateItem atomically; bare moto does not (its ADD is a read, then a
    # write, with no lock): the local runtime's one-request-at-a-time lock gives it AWS's answer.
    undo = serial.install()
    try:
        _count_concurrently()
    finally:
        undo()


def _count_concurrently() -> None:
    store = _store()
    one = Operations(
        read_units=0.5, write_units=1, functions={"tool_worker": FunctionUse(requests=1, mb_ms=512)}
    )

    def add() -> None:
        for _ in range(10):
            store.add_costs("r", one)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ops = store.get_costs("r")
    assert ops.read_units == 20.0 and ops.write_units == 40
    assert ops.functions["tool_worker"] == FunctionUse(requests=40, mb_ms=40 * 512)


@mock_aws
def test_a_deleted_run_leaves_no_counters_and_takes_none_back() -> None:
    store = _store()
    store.add_costs("r", Operations(events=1))
    assert store.count_execution("r", "r", 7)
    store.delete_run("r")
    assert store.add_costs("r", Operations(events=1)) is False
    assert store.count_execution("r", "r--2", 3) is False
    items = store._table.scan()["Items"]
    assert items == []


@mock_aws
def test_an_ended_execution_is_counted_once() -> None:
    store = _store()
    assert store.count_execution("r", "r", 9) is True
    assert store.count_execution("r", "r", 9) is False  # the same event again
    assert store.get_costs("r").state_transitions == 9
