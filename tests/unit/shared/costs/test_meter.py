"""The per-invocation meter: what the pipeline's clients do counts for the run being worked for,
an invocation's own duration and request are billed once, and nothing counts without a run."""

import boto3
import pytest
from moto import mock_aws

from toolpipe.shared.costs import meter as meters
from toolpipe.shared.costs.invocation import API_REQUEST, FLUSH, metered
from toolpipe.shared.costs.operations import Operations
from toolpipe.shared.history.memory import MemoryHistoryStore
from toolpipe.shared.messages import RunRecord, UserMessage


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_time_is_split_between_the_runs_a_batch_worked_for() -> None:
    clock = Clock()
    meter = meters.Meter(clock)
    clock.now += 0.010  # parsing, before any run is known: the first run's
    meter.attribute("a")
    meter.add({"sqs_requests": 1})
    clock.now += 0.020
    meter.detach()
    meter.add({"events": 1})  # the second start, before its run id is known
    clock.now += 0.005
    meter.attribute("b")
    clock.now += 0.001
    by_run = meter.close("triggers", memory_mb=256)
    assert by_run["a"].functions["triggers"].requests == 1  # one invocation: billed once
    assert by_run["a"].functions["triggers"].mb_ms == 30 * 256
    assert by_run["a"].sqs_requests == 1 and by_run["a"].events == 0
    assert by_run["b"].functions["triggers"].requests == 0
    assert by_run["b"].functions["triggers"].mb_ms == 6 * 256
    assert by_run["b"].events == 1


def test_an_invocation_for_no_run_counts_nowhere() -> None:
    meter = meters.Meter()
    meter.add({"dynamodb_requests": 3})
    assert meter.close("api", 512) == {}


@mock_aws
def test_only_watched_clients_count_and_only_inside_an_invocation() -> None:
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    ddb.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    watched = boto3.resource("dynamodb", region_name="us-east-1").Table("t")
    meters.watch(watched.meta.client)
    tools_own = boto3.client("dynamodb", region_name="us-east-1")  # what a tool would build

    watched.put_item(Item={"pk": "outside"})  # no meter: counts nowhere
    meter = meters.Meter()
    token = meters.use(meter)
    try:
        meters.attribute("run")
        watched.put_item(Item={"pk": "a", "data": "x" * 1500})
        answer = watched.update_item(
            Key={"pk": "a"}, UpdateExpression="SET n = :n", ExpressionAttributeValues={":n": 1}
        )
        tools_own.put_item(TableName="t", Item={"pk": {"S": "tool"}})
        watched.get_item(Key={"pk": "a"})
    finally:
        meters.release(token)
    ops = meter.close("orchestrator", 512)["run"]
    assert ops.dynamodb_requests == 3
    assert ops.write_units == 2 + 2  # 1.5 KB put, then the same item (a bit more) updated
    assert ops.read_units == 0.5
    # The item the meter asked back for is not handed to a caller that did not ask for it.
    assert "Attributes" not in answer


def _store_with_run(run_id: str) -> MemoryHistoryStore:
    store = MemoryHistoryStore()
    record = RunRecord(run_id=run_id, agent="a", status="running", created_at="2026-01-01T00:00:00Z")
    store.create_run(record, UserMessage(seq=1, turn=0, content="hi"))
    return store


def test_a_metered_handler_adds_its_counts_and_the_write_of_them() -> None:
    store = _store_with_run("r")

    @metered("api", lambda: store, per_request=API_REQUEST)
    def handler(event: dict[str, str], context: object) -> str:
        meters.attribute(event["run_id"])
        meters.count({"events": 2})
        return "ok"

    class Context:
        memory_limit_in_mb = "1024"  # text, as some runtimes give it

    assert handler({"run_id": "r"}, Context()) == "ok"
    ops = store.get_costs("r")
    assert ops.events == 2 and ops.api_requests == 1
    assert ops.functions["api"].requests == 1 and ops.functions["api"].mb_ms >= 1024
    assert ops.dynamodb_requests == FLUSH.dynamodb_requests


def test_a_handler_that_raises_still_counts_what_it_made() -> None:
    store = _store_with_run("r")

    @metered("orchestrator", lambda: store)
    def handler(event: object, context: object) -> None:
        meters.attribute("r")
        meters.count({"sqs_requests": 1})
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError):
        handler({}, object())
    assert store.get_costs("r").sqs_requests == 1


def test_a_deleted_run_gets_no_counters_back() -> None:
    store = _store_with_run("r")
    store.delete_run("r")
    assert store.add_costs("r", Operations(events=1)) is False
    assert store.get_costs("r") == Operations()


def test_an_execution_is_counted_once() -> None:
    store = _store_with_run("r")
    assert store.count_execution("r", "r", 9) is True
    assert store.count_execution("r", "r", 9) is False
    assert store.count_execution("r", "r--2", 5) is True
    assert store.get_costs("r").state_transitions == 14
