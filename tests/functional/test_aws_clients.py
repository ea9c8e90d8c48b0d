"""A function's services share its boto3 clients (shared/aws_clients.py): one per service and
configuration, made at first use; its tables share one DynamoDB resource, whose requests count
in the runs' cost. A new runtime's functions (each a cold start) make no client twice."""

import gc
import importlib.util
import threading
import weakref
from collections import Counter
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.config import Config
from moto import mock_aws

from tests.conftest import Pipeline, Reply, _pipeline, call
from toolpipe.infra.local import caller
from toolpipe.shared.aws_clients import AwsClients
from toolpipe.shared.costs import meter as meters
from toolpipe.shared.runs.events import CLIENT_CONFIG
from toolpipe.shared.runs.factory import HISTORY_READ_CONFIG, PRESIGN_CONFIG

# What the stack sets on the functions, placeholders: nothing here calls AWS or a model.
ENV = {
    "TABLE_NAME": "runs",
    "BUCKET_NAME": "contents",
    "EVENT_BUS_NAME": "bus",
    "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:toolpipe",
    "TOOLPIPE_MODEL_RATE_TABLE": "rates",
    "TOOLPIPE_MODEL_RATE_PER_MINUTE": "60",
    "TOOLPIPE_TOOL_RUNNER": "runner",
    "OPENAI_API_KEY": "none",
    "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
}


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
    invocation, building their services then: a start, a model step, a tool call, the meter's
    counts. (Every service each function can build: the test below.)"""
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


def test_runtimes_started_one_after_another_keep_only_the_last_ones_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each runtime is a cold start of every function, with clients of its own: a process that
    starts runtime after runtime (a project's tests) must not keep the earlier ones' alive."""
    made: list[weakref.ref[AwsClients]] = []
    init = AwsClients.__init__

    def tracked(self: AwsClients) -> None:
        init(self)
        made.append(weakref.ref(self))

    monkeypatch.setattr(AwsClients, "__init__", tracked)
    alive: list[int] = []
    for _ in range(4):
        for pipeline in _pipeline():
            pipeline.script(Reply(tool_calls=[call("count_once", label="a")]), Reply(content="counted"))
            assert pipeline.finish(pipeline.start("Count once"))["run"]["status"] == "succeeded"
        gc.collect()
        alive.append(sum(ref() is not None for ref in made))
    assert len(made) >= 4 * 3  # every runtime's api, orchestrator and tool worker made their own
    assert alive[-1] == alive[1], alive  # the last runtime's functions' own, not every runtime's


def _cold(module: str) -> Any:
    """The handler module imported afresh, as a cold start does (not the one `sys.modules` holds)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.loader is not None
    handler = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(handler)
    return handler


def _orchestrator() -> None:
    handler = _cold("toolpipe.functions.orchestrator.handler")
    for build in (
        handler.service,
        handler.approvals,
        handler.active_time,
        handler.transitions,
        handler.costs,
    ):
        build()


def _tool_worker() -> None:
    handler = _cold("toolpipe.functions.tool_worker.handler")
    handler.service()
    handler.costs()


def _triggers() -> None:
    handler = _cold("toolpipe.functions.triggers.handler")
    handler.service()
    handler.costs()


def _api() -> None:
    services = _cold("toolpipe.functions.api.handler").services
    for name in (
        "costs",
        "starter",
        "canceller",
        "resumer",
        "forker",
        "deleter",
        "reader",
        "timeline",
        "page",
    ):
        getattr(services, name)


def _label(service: str, config: Any) -> str:
    """A client as the test names it: its service and which configuration it was made with."""
    named = {id(None): "", id(CLIENT_CONFIG): ":events", id(HISTORY_READ_CONFIG): ":history"}
    named[id(PRESIGN_CONFIG)] = ":presign"
    if id(config) in named:
        return service + named[id(config)]
    # boto3 makes a resource's client with a configuration of its own; the runner's Lambda
    # client's is made by its builder.
    return f"{service}:{'resource' if service == 'dynamodb' else 'own'}"


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (
            _orchestrator,
            ["dynamodb:resource", "events:events", "s3", "stepfunctions", "stepfunctions:history"],
        ),
        (
            _tool_worker,
            ["dynamodb:resource", "events:events", "lambda:own", "s3", "s3:presign", "stepfunctions"],
        ),
        (_triggers, ["dynamodb:resource", "events:events", "s3", "stepfunctions"]),
        # The reader's and the timeline's approval records too: through the one resource.
        (_api, ["dynamodb:resource", "events:events", "s3", "s3:presign", "stepfunctions"]),
    ],
    ids=["orchestrator", "tool_worker", "triggers", "api"],
)
def test_every_service_a_function_builds_shares_its_clients(
    build: Any, expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each function's every service, as its handler builds them: one client per service and
    configuration; EventBridge's with its short timeouts (`CLIENT_CONFIG`), the execution-history
    reads with adaptive retries, the links' S3 with SigV4, the runner's Lambda with its own."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    made: list[str] = []
    create_client = botocore.session.Session.create_client

    def counted(self: Any, service_name: str, *args: Any, **kwargs: Any) -> Any:
        made.append(_label(service_name, kwargs.get("config")))
        return create_client(self, service_name, *args, **kwargs)

    monkeypatch.setattr(botocore.session.Session, "create_client", counted)
    with mock_aws():
        build()
    assert sorted(made) == expected
