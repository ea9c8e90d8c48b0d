"""A function's services share its boto3 clients (shared/aws_clients.py): one per service and
configuration, made at first use; its tables share one DynamoDB resource, whose requests count
in the runs' cost. A new runtime's functions (each a cold start) make no client twice."""

import threading
from collections import Counter
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.config import Config
from moto import mock_aws

from tests.conftest import Pipeline, Reply, call
from toolpipe.infra.local import caller
from toolpipe.shared.aws_clients import AwsClients
from toolpipe.shared.costs import meter as meters
from toolpipe.shared.runs.factory import PRESIGN_CONFIG


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        yield AwsClients()


def test_one_client_per_service_and_configuration_object(aws: AwsClients) -> None:
    s3 = aws.client("s3")
    assert aws.client("s3") is s3
    assert aws.client("stepfunctions") is not s3
    presign = aws.client("s3", PRESIGN_CONFIG)
    assert presign is not s3 and aws.client("s3", PRESIGN_CONFIG) is presign
    # Told apart by identity: an equal configuration made elsewhere is not taken to be this one.
    assert aws.client("s3", Config(signature_version="s3v4")) is not presign
    assert AwsClients().client("s3") is not s3  # another function's: its own


def test_concurrent_first_uses_make_one_client(aws: AwsClients) -> None:
    made: list[Any] = []
    threads = [threading.Thread(target=lambda: made.append(aws.client("sqs"))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(client) for client in made}) == 1


def test_tables_share_one_resource_and_their_requests_count(aws: AwsClients) -> None:
    boto3.client("dynamodb").create_table(
        TableName="runs",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    runs, other = aws.table("runs"), aws.table("rates")
    assert runs.meta.client is other.meta.client
    meter = meters.Meter()
    token = meters.use(meter)
    try:
        meters.attribute("r1")
        runs.put_item(Item={"pk": "a"})
        runs.get_item(Key={"pk": "a"})
    finally:
        meters.release(token)
    assert meter.close("api", 512)["r1"].dynamodb_requests == 2


def test_a_new_runtimes_functions_make_no_client_twice(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime was started by the fixture; its functions start cold at their first
    invocation, building their services then: a run with a tool call, approvals and events."""
    made: Counter[tuple[str, str, int]] = Counter()
    create_client = botocore.session.Session.create_client

    def counted(self: Any, service_name: str, *args: Any, **kwargs: Any) -> Any:
        function = caller.current()
        if function is not None:
            made[(function.name, service_name, id(kwargs.get("config")))] += 1
        return create_client(self, service_name, *args, **kwargs)

    monkeypatch.setattr(botocore.session.Session, "create_client", counted)
    pipeline.script(Reply(tool_calls=[call("count_once", label="a")]), Reply(content="counted"))
    run_id = pipeline.start("Count once")
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    functions = {name for name, _, _ in made}
    assert {"api", "orchestrator", "tool_worker"} <= functions
    assert [key for key, count in made.items() if count > 1] == []
    # The orchestrator's model step, approvals, active time and cost counts: one client each of
    # DynamoDB, S3 and EventBridge, and Step Functions with its two configurations.
    assert sorted(service for name, service, _ in made if name == "orchestrator") == [
        "dynamodb",
        "events",
        "s3",
        "stepfunctions",
        "stepfunctions",
    ]
