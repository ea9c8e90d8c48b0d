"""The pieces that make each local function itself: its environment view, the context its
threads inherit, and which action on which resource IAM authorizes for a call."""

import contextlib
import os
import threading
import urllib.request
from typing import Any

import pytest
from botocore.exceptions import ClientError

from toolpipe.infra.local import conditions, iam, isolation
from toolpipe.infra.local.isolation import FunctionContext, running_as

ARN = "arn:aws:{}:us-east-1:123456789012:{}"
TABLE = ARN.format("dynamodb", "table/history")


def _policy(*statements: dict[str, object]) -> iam.Policy:
    return iam.Policy(
        role_arn="arn:aws:iam::123456789012:role/worker",
        documents=({"Version": "2012-10-17", "Statement": list(statements)},),
        state_machine_arn=ARN.format("states", "stateMachine:flow"),
    )


def _context(**environment: str) -> FunctionContext:
    return FunctionContext(
        name="worker",
        environment=dict(environment),
        policy=_policy(),
        owned=frozenset({"TABLE_NAME", "SECRET_ARN", "OPENAI_BASE_URL"}),
        passthrough=frozenset({"OPENAI_BASE_URL"}),
    )


@pytest.fixture
def installed() -> object:
    undo = isolation.install()
    yield
    undo()


@pytest.mark.usefixtures("installed")
def test_a_function_sees_its_own_variables_and_the_rest_of_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SECRET_ARN", "the orchestrator's")
    monkeypatch.setenv("MY_TOOL_SETTING", "shell")
    monkeypatch.setenv("TABLE_NAME", "the process's")
    with running_as(_context(TABLE_NAME="history")):
        assert os.environ["TABLE_NAME"] == "history"
        assert "SECRET_ARN" not in os.environ and os.getenv("SECRET_ARN") is None
        assert os.environ["MY_TOOL_SETTING"] == "shell"  # not toolpipe's: the shell's
        os.environ["TABLE_NAME"] = "changed"  # a function's own write stays its own
        assert "SECRET_ARN" not in dict(os.environ)
    assert os.environ["TABLE_NAME"] == "the process's" and os.environ["SECRET_ARN"] == "the orchestrator's"


@pytest.mark.usefixtures("installed")
def test_a_passthrough_setting_is_read_live_from_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    context = _context(OPENAI_BASE_URL="http://from-start")
    with running_as(context):
        assert os.environ["OPENAI_BASE_URL"] == "http://from-start"
        monkeypatch.setenv("OPENAI_BASE_URL", "http://set-later")
        assert os.environ["OPENAI_BASE_URL"] == "http://set-later"
        # Undone in here: outside, the value it found (the function's) would land in the
        # process's environment and point later tests' model at http://from-start.
        monkeypatch.undo()
    assert os.environ.get("OPENAI_BASE_URL") != "http://from-start"


@pytest.mark.usefixtures("installed")
def test_every_way_of_reading_the_environment_gives_the_functions_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`items()`, `copy()`, `in` and `len` are read in one pass (botocore reads the proxy
    settings four times over for each client it builds): each gives what `environ[name]` does
    for each name iteration lists, and a name that is not text is refused as `os.environ` does."""
    monkeypatch.setenv("SECRET_ARN", "the orchestrator's")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://set-later")
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    for context in (None, _context(TABLE_NAME="history", OPENAI_BASE_URL="http://from-start")):
        with running_as(context) if context else contextlib.nullcontext():
            by_name = {name: os.environ[name] for name in os.environ}
            assert dict(os.environ.items()) == os.environ.copy() == by_name
            assert len(os.environ) == len(by_name)
            assert all(name in os.environ for name in by_name)
            assert ("SECRET_ARN" in os.environ) is (context is None)
            with pytest.raises(TypeError):
                assert b"PATH" not in os.environ
            assert urllib.request.getproxies()["https"] == "http://proxy.example:3128"
    with running_as(_context(TABLE_NAME="history", OPENAI_BASE_URL="http://from-start")):
        assert os.environ.copy()["TABLE_NAME"] == "history"
        assert os.environ.copy()["OPENAI_BASE_URL"] == "http://set-later"  # passthrough: the process's


@pytest.mark.usefixtures("installed")
def test_threads_a_function_starts_act_as_it() -> None:
    seen: list[object] = []
    context = _context()
    with running_as(context):
        thread = threading.Thread(target=lambda: seen.append(isolation.current()))
        thread.start()
        thread.join()
    outside = threading.Thread(target=lambda: seen.append(isolation.current()))
    outside.start()
    outside.join()
    assert seen == [context, None]


def test_uninstalled_the_process_environment_is_os_environ_again() -> None:
    before = os.environ
    outer = isolation.install()
    inner = isolation.install()  # nested runtimes: the first undo keeps it
    inherit = threading.Thread.start
    inner()
    inner()  # an undo runs once
    assert isinstance(os.environ, isolation.FunctionEnviron)
    outer()
    # Threads go on inheriting: a function's thread may outlive its runtime (caller.threads_inherit).
    assert os.environ is before and threading.Thread.start is inherit


@pytest.mark.parametrize(
    ("service", "operation", "params", "expected"),
    [
        (
            "dynamodb",
            "Query",
            {"TableName": "history", "IndexName": "ByCaller"},
            [iam.Request("dynamodb:Query", TABLE + "/index/ByCaller")],
        ),
        (
            "dynamodb",
            "TransactWriteItems",
            {"TransactItems": [{"Put": {"TableName": "history"}}, {"Update": {"TableName": "other"}}]},
            [
                iam.Request("dynamodb:PutItem", TABLE),
                iam.Request("dynamodb:UpdateItem", ARN.format("dynamodb", "table/other")),
            ],
        ),
        (
            "s3",
            "HeadObject",
            {"Bucket": "b", "Key": "runs/1"},
            [iam.Request("s3:GetObject", "arn:aws:s3:::b/runs/1")],
        ),
        (
            "s3",
            "HeadObject",
            {"Bucket": "b", "Key": "inbox/1", "VersionId": "v1"},
            [iam.Request("s3:GetObjectVersion", "arn:aws:s3:::b/inbox/1")],
        ),
        ("s3", "ListObjectsV2", {"Bucket": "b"}, [iam.Request("s3:ListBucket", "arn:aws:s3:::b")]),
        (
            "sqs",
            "SendMessage",
            {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/tools"},
            [iam.Request("sqs:SendMessage", ARN.format("sqs", "tools"))],
        ),
        (
            "states",
            "SendTaskSuccess",
            {"taskToken": "t"},
            [iam.Request("states:SendTaskSuccess", ARN.format("states", "stateMachine:flow"))],
        ),
        (
            "events",
            "PutEvents",
            {
                "Entries": [
                    {"Detail": "{}"},
                    {
                        "EventBusName": "runs",
                        "Source": "toolpipe",
                        "DetailType": "RunStarted",
                        "Detail": "{}",
                    },
                ]
            },
            [
                iam.Request("events:PutEvents", ARN.format("events", "event-bus/default")),
                iam.Request(
                    "events:PutEvents",
                    ARN.format("events", "event-bus/runs"),
                    {"events:source": ("toolpipe",), "events:detail-type": ("RunStarted",)},
                ),
            ],
        ),
        (
            "ses",
            "SendEmail",
            {"Source": "Ana <ana@example.com>"},
            [iam.Request("ses:SendEmail", ARN.format("ses", "identity/ana@example.com"))],
        ),
    ],
)
def test_each_call_is_authorized_as_iam_names_its_actions_and_resources(
    service: str, operation: str, params: dict[str, object], expected: list[iam.Request]
) -> None:
    assert iam.requests(service, operation, params, _policy()) == expected


def test_a_statement_allows_its_actions_on_its_resources_only_and_a_deny_wins() -> None:
    policy = _policy(
        {
            "Effect": "Allow",
            "Action": ["dynamodb:GetItem", "dynamodb:Query"],
            "Resource": [TABLE, TABLE + "/index/*"],
        },
        {"Effect": "Deny", "Action": "dynamodb:Query", "Resource": TABLE + "/index/Secret"},
    )
    iam.authorize(policy, "dynamodb", "GetItem", {"TableName": "history"})
    iam.authorize(policy, "dynamodb", "Query", {"TableName": "history", "IndexName": "ByCaller"})
    for operation, params in [
        ("PutItem", {"TableName": "history"}),
        ("GetItem", {"TableName": "other"}),
        ("Query", {"TableName": "history", "IndexName": "Secret"}),
    ]:
        with pytest.raises(ClientError) as raised:
            iam.authorize(policy, "dynamodb", operation, params)
        assert raised.value.response["Error"]["Code"] == "AccessDeniedException"
        assert "arn:aws:iam::123456789012:role/worker is not authorized" in str(raised.value)
    iam.authorize(policy, "sts", "GetCallerIdentity", {})  # AWS allows it to anyone


# --- conditions: evaluated as IAM does, not as moto does ---------------------------------------

BUS = ARN.format("events", "event-bus/runs")
OWN_EVENTS = {
    "Effect": "Allow",
    "Action": "events:PutEvents",
    "Resource": BUS,
    "Condition": {
        "ForAllValues:StringEquals": {"events:source": "toolpipe", "events:detail-type": ["RunStarted"]},
        "Null": {"events:source": "false", "events:detail-type": "false"},
    },
}


def _entry(detail_type: str | None, source: str | None = "toolpipe") -> iam.Request:
    [request] = iam.requests(
        "events",
        "PutEvents",
        {
            "Entries": [
                {
                    "EventBusName": "runs",
                    "Detail": "{}",
                    **({} if source is None else {"Source": source}),
                    **({} if detail_type is None else {"DetailType": detail_type}),
                }
            ]
        },
        _policy(),
    )
    return request


def test_put_events_is_allowed_only_for_the_sources_and_detail_types_a_statement_names() -> None:
    policy = _policy(OWN_EVENTS)
    assert policy.allows(_entry("RunStarted"))
    assert not policy.allows(_entry("RunRequested"))
    assert not policy.allows(_entry("RunStarted", source="toolpipe.requests"))
    # ForAllValues holds over no values: the Null check is what refuses an entry without them.
    assert not policy.allows(_entry(None))
    assert not policy.allows(_entry("RunStarted", source=None))


def test_an_allow_whose_condition_fails_denies_nothing_and_an_unknown_operator_fails_closed() -> None:
    # moto 5.2.5 answers DENIED for an Allow whose condition fails, and lets unknown operators pass.
    anything = {"Effect": "Allow", "Action": "events:PutEvents", "Resource": BUS}
    assert _policy(OWN_EVENTS, anything).allows(_entry("RunRequested"))
    unknown = {**anything, "Condition": {"DateGreaterThan": {"aws:CurrentTime": "2020-01-01T00:00:00Z"}}}
    assert not _policy(unknown).allows(_entry("RunStarted"))
    assert not _policy(anything, {**unknown, "Effect": "Deny"}).allows(_entry("RunStarted"))
    deny_requests = {
        "Effect": "Deny",
        "Action": "events:PutEvents",
        "Resource": "*",
        "Condition": {"StringEquals": {"EVENTS:Detail-Type": "RunRequested"}},  # keys ignore case
    }
    assert not _policy(anything, deny_requests).allows(_entry("RunRequested"))
    assert _policy(anything, deny_requests).allows(_entry("RunStarted"))


@pytest.mark.parametrize(
    ("condition", "context", "holds"),
    [
        ({"StringEquals": {"k": ["a", "b"]}}, {"k": ("b",)}, True),
        ({"StringEquals": {"k": "a"}}, {}, False),  # a key the request lacks fails...
        ({"StringNotEquals": {"k": "a"}}, {}, True),  # ...but a negated operator
        ({"StringEqualsIfExists": {"k": "a"}}, {}, True),  # ...and IfExists
        ({"StringNotEquals": {"k": "a"}}, {"k": ("a",)}, False),
        ({"StringLike": {"k": "run-*"}}, {"k": ("run-7",)}, True),
        ({"StringLike": {"k": "run-?"}}, {"k": ("run-77",)}, False),
        ({"StringEqualsIgnoreCase": {"k": "ABC"}}, {"k": ("abc",)}, True),
        ({"StringEquals": {"k": "ABC"}}, {"k": ("abc",)}, False),
        ({"ForAllValues:StringEquals": {"k": ["a", "b"]}}, {"k": ("a", "b")}, True),
        ({"ForAllValues:StringEquals": {"k": ["a"]}}, {"k": ("a", "c")}, False),
        ({"ForAllValues:StringEquals": {"k": ["a"]}}, {}, True),
        ({"ForAnyValue:StringEquals": {"k": ["a"]}}, {"k": ("c", "a")}, True),
        ({"ForAnyValue:StringEquals": {"k": ["a"]}}, {}, False),
        ({"Null": {"k": "true"}}, {}, True),
        ({"Null": {"k": "false"}}, {}, False),
        ({"Null": {"k": True}}, {}, True),  # JSON true is "true"
        ({"ArnLike": {"k": "arn:aws:iam::*:role/admin"}}, {"k": ("arn:aws:iam::1:role/admin",)}, True),
        # A wildcard stays within its part of the ARN.
        ({"ArnLike": {"k": "arn:aws:iam::*"}}, {"k": ("arn:aws:iam::1:role/admin",)}, False),
        ({"StringEquals": {"a": "1"}, "StringLike": {"b": "2*"}}, {"a": ("1",), "b": ("3",)}, False),
    ],
)
def test_condition_operators(
    condition: dict[str, Any], context: dict[str, tuple[str, ...]], holds: bool
) -> None:
    assert conditions.hold(condition, context) is holds
