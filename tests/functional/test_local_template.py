"""What the local runtime creates is what the template defines, resource by resource, and a
template that says otherwise changes what runs (held against the packaged template, which
`tests/infra/test_local_template.py` holds equal to a fresh synthesis)."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from toolpipe.infra.cdk.definition import definition_json, execution_ended_pattern, substitute
from toolpipe.infra.cdk.functions import FUNCTIONS, runner_spec
from toolpipe.infra.local import deployment, triggers
from toolpipe.infra.local.isolation import running_as
from toolpipe.infra.local.runtime import REGION, LocalRuntime
from toolpipe.infra.local.template import PACKAGED, Template, load


@pytest.fixture
def runtime() -> Iterator[LocalRuntime]:
    with LocalRuntime(workers=0) as rt:
        yield rt


def _resources(t: Template, kind: str) -> dict[str, dict[str, Any]]:
    return {name: r.get("Properties", {}) for name, r in t.of_type(kind).items()}


def test_the_table_has_the_templates_keys_and_indexes(runtime: LocalRuntime) -> None:
    (props,) = [
        p for k, p in _resources(runtime.template, "AWS::DynamoDB::Table").items() if k.startswith("History")
    ]
    table = boto3.client("dynamodb", region_name=REGION).describe_table(TableName="toolpipe-local")["Table"]
    assert table["KeySchema"] == props["KeySchema"]
    assert sorted(table["AttributeDefinitions"], key=str) == sorted(props["AttributeDefinitions"], key=str)
    assert table["BillingModeSummary"]["BillingMode"] == props["BillingMode"]
    indexes = {i["IndexName"]: i for i in table["GlobalSecondaryIndexes"]}
    for index in props["GlobalSecondaryIndexes"]:
        assert indexes[index["IndexName"]]["KeySchema"] == index["KeySchema"]
        assert indexes[index["IndexName"]]["Projection"] == index["Projection"]


def test_every_queue_has_the_templates_settings_and_dead_letters(runtime: LocalRuntime) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    for name, props in _resources(runtime.template, "AWS::SQS::Queue").items():
        url = runtime.deployment.refs[name]
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        for setting in ("VisibilityTimeout", "MessageRetentionPeriod"):
            if setting in props:
                assert attributes[setting] == str(props[setting]), (name, setting)
        if "RedrivePolicy" in props:
            redrive = json.loads(attributes["RedrivePolicy"])
            target = props["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
            assert redrive["deadLetterTargetArn"] == runtime.deployment.attributes[(target, "Arn")]
            assert int(redrive["maxReceiveCount"]) == props["RedrivePolicy"]["maxReceiveCount"]
    # The tool queue is the one the template's event source mapping reads, batch size 1 as the
    # local workers take it.
    (mapping,) = _resources(runtime.template, "AWS::Lambda::EventSourceMapping").values()
    assert (
        runtime.deployment.attributes[(mapping["EventSourceArn"]["Fn::GetAtt"][0], "Arn")]
        == runtime.queue_arn
    )
    assert mapping["BatchSize"] == 1 and mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_the_state_machine_runs_the_templates_definition(runtime: LocalRuntime) -> None:
    described = boto3.client("stepfunctions", region_name=REGION).describe_state_machine(
        stateMachineArn=runtime.state_machine_arn
    )
    # The definition the template ships is the one infra/cdk/definition.py builds, substituted.
    expected = substitute(
        definition_json(),
        {
            "OrchestratorFunctionArn": runtime.deployment.function_arns["orchestrator"],
            "ToolQueueUrl": runtime.queue_url,
        },
    )
    assert json.loads(described["definition"]) == json.loads(expected)
    assert described["roleArn"] == runtime.deployment.state_machine_context().policy.role_arn


def test_functions_buckets_bus_and_rules_are_the_templates(runtime: LocalRuntime) -> None:
    lambdas = boto3.client("lambda", region_name=REGION)
    for spec, name, props in runtime.template.functions():
        config = lambdas.get_function_configuration(FunctionName=runtime.deployment.refs[name])
        assert (config["Handler"], config["Timeout"], config["MemorySize"]) == (
            props["Handler"],
            props["Timeout"],
            props["MemorySize"],
        ), spec.name
    # Every function of the stack's, and the example's "mail" runner beside the default one.
    assert {spec.name for spec, _, _ in runtime.template.functions()} == {
        *FUNCTIONS,
        runner_spec("mail").name,
    }
    s3 = boto3.client("s3", region_name=REGION)
    assert {b["Name"] for b in s3.list_buckets()["Buckets"]} >= {
        runtime.deployment.refs[n] for n in runtime.template.of_type("AWS::S3::Bucket")
    }
    (notification,) = _resources(runtime.template, "Custom::S3BucketNotifications").values()
    configured = s3.get_bucket_notification_configuration(Bucket=runtime.trigger_bucket)
    wanted = notification["NotificationConfiguration"]["LambdaFunctionConfigurations"][0]
    (got,) = configured["LambdaFunctionConfigurations"]
    assert got["Filter"] == wanted["Filter"] and got["Events"] == wanted["Events"]
    assert got["LambdaFunctionArn"] == runtime.deployment.function_arns["triggers"]
    # The rules the runtime applies itself (moto cannot target Lambda) are the template's.
    rules = {
        r["Properties"]["Description"]: r["Properties"]
        for r in runtime.template.of_type("AWS::Events::Rule").values()
    }
    patterns = [runtime.deployment.resolve(rule["EventPattern"]) for rule in rules.values()]
    assert execution_ended_pattern(runtime.state_machine_arn) in patterns
    assert triggers.RUN_REQUESTED_PATTERN in patterns


def test_each_functions_environment_and_role_are_the_templates(runtime: LocalRuntime) -> None:
    for spec, _, props in runtime.template.functions():
        context = runtime.functions[spec.name]
        templated = runtime.deployment.resolve(props["Environment"]["Variables"])
        declared = set(deployment.LOCAL_ADDITIONS["*"]) | set(deployment.LOCAL_ADDITIONS.get(spec.name, ()))
        extra = set(context.environment) - set(templated)
        assert extra <= declared, (spec.name, extra - declared)
        removed = set(deployment.LOCAL_REMOVALS.get(spec.name, ()))
        assert set(templated) - set(context.environment) <= removed | {"TOOLPIPE_APP"}
        for name, value in templated.items():
            if name != "TOOLPIPE_APP" and name not in removed:  # the app the developer runs
                assert context.environment[name] == str(value), (spec.name, name)
        role = props["Role"]["Fn::GetAtt"][0]
        assert list(context.policy.documents) == runtime.deployment.resolve(
            runtime.template.role_policies(role)
        )


def test_a_template_that_says_otherwise_changes_what_runs(tmp_path: Path) -> None:
    """The runtime follows the template: a queue setting, a function's variable and a grant
    changed in it are what the runtime then has (so no copy of them is kept elsewhere)."""
    data = json.loads(PACKAGED.read_text())
    worker = next(
        r
        for r in data["Resources"].values()
        if r["Properties"].get("Handler") == FUNCTIONS["tool_worker"].handler
    )
    worker["Properties"]["Environment"]["Variables"]["TOOLPIPE_HEARTBEAT_EVERY"] = "7"
    mapping = next(r for r in data["Resources"].values() if r["Type"] == "AWS::Lambda::EventSourceMapping")
    queue = data["Resources"][mapping["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]]
    queue["Properties"]["VisibilityTimeout"] = 901
    role = worker["Properties"]["Role"]["Fn::GetAtt"][0]
    for policy in data["Resources"].values():
        if policy["Type"] == "AWS::IAM::Policy" and {"Ref": role} in policy["Properties"]["Roles"]:
            statements = policy["Properties"]["PolicyDocument"]["Statement"]
            policy["Properties"]["PolicyDocument"]["Statement"] = [
                s for s in statements if "dynamodb:GetItem" not in json.dumps(s)
            ]
    worker["Properties"]["Timeout"] = 7
    for rule in data["Resources"].values():
        if rule["Type"] == "AWS::Events::Rule":
            rule["Properties"]["State"] = "DISABLED"
    changed = tmp_path / "changed.template.json"
    changed.write_text(json.dumps(data))
    load.cache_clear()
    with LocalRuntime(workers=0, template_path=changed) as rt:
        assert rt.functions["tool_worker"].environment["TOOLPIPE_HEARTBEAT_EVERY"] == "7"
        # The worker's invocations get the template's timeout; rules it disables are not applied.
        assert rt.functions["tool_worker"].timeout_seconds == 7 and rt.workers is not None
        assert rt.workers._timeout == 7
        events = boto3.client("events", region_name=REGION)
        rule = events.describe_rule(Name="toolpipe-local-run-requested", EventBusName=rt.event_bus_name)
        assert rule["State"] == "DISABLED"
        assert not rt.deployment.rule_enabled(execution_ended_pattern(rt.state_machine_arn))
        attributes = boto3.client("sqs", region_name=REGION).get_queue_attributes(
            QueueUrl=rt.queue_url, AttributeNames=["VisibilityTimeout"]
        )
        assert attributes["Attributes"]["VisibilityTimeout"] == "901"
        with running_as(rt.functions["tool_worker"]), pytest.raises(ClientError) as raised:
            boto3.client("dynamodb", region_name=REGION).get_item(
                TableName="toolpipe-local", Key={"pk": {"S": "a"}, "sk": {"S": "b"}}
            )
        assert raised.value.response["Error"]["Code"] == "AccessDeniedException"


def test_a_template_that_is_not_toolpipes_is_one_line(tmp_path: Path) -> None:
    from toolpipe.infra.local.template import TemplateError

    bad = tmp_path / "bad.json"
    bad.write_text('{"Resources": {}}')
    with (
        pytest.raises(TemplateError, match="expected one AWS::DynamoDB::Table"),
        LocalRuntime(workers=0, template_path=bad),
    ):
        pass


def test_the_worker_pool_runs_no_more_than_the_event_sources_maximum_concurrency(tmp_path: Path) -> None:
    data = json.loads(PACKAGED.read_text())
    mapping = next(r for r in data["Resources"].values() if r["Type"] == "AWS::Lambda::EventSourceMapping")
    assert mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"] == 20  # the stack's default
    mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"] = 3
    changed = tmp_path / "changed.template.json"
    changed.write_text(json.dumps(data))
    load.cache_clear()
    with LocalRuntime(workers=10, template_path=changed) as rt:
        assert rt.workers is not None and rt.workers.size == 3
