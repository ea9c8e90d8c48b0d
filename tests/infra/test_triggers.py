"""The triggers construct on the synthesized template: the S3 notification, the RunRequested
rule, the schedules and their role, and grants that stop at the prefixes."""

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from aws_cdk.assertions import Match

from tests.infra.policies import per_resource
from toolpipe.infra.cdk.constructs.triggers import TriggerSchedule

SCHEDULES = [
    {
        "name": "daily-time",
        "expression": "cron(0 7 * * ? *)",
        "agent": "assistant",
        "input": "what time is it",
        "timezone": "Europe/Paris",
    }
]
CONTEXT = {
    "trigger_schedules": json.dumps(SCHEDULES),  # as `-c trigger_schedules='[...]'` gives it
    "trigger_input_prefix": "in/",
    "trigger_output_prefix": "out/",
    "trigger_principal": "arn:aws:iam::123456789012:role/reports",
    # As cdk.json gives a list: the sources whose RunRequested starts a run.
    "trigger_sources": ["com.example.billing", "com.example.crm"],
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The stack with schedules configured, cdk-nag included (findings fail the synth)."""
    from aws_cdk.assertions import Template

    from toolpipe.infra.cdk.app import build_app

    app, _ = build_app(bundle=False, outdir=str(tmp_path_factory.mktemp("cdk.out")), context=CONTEXT)
    yield Template.from_json(app.synth().get_stack_by_name("Toolpipe").template)


def _function(template: Any) -> tuple[str, dict[str, Any]]:
    found = template.find_resources(
        "AWS::Lambda::Function",
        {"Properties": {"Handler": "toolpipe.functions.triggers.handler.lambda_handler"}},
    )
    assert len(found) == 1
    return next(iter(found.items()))


def _bucket(template: Any) -> str:
    found = template.find_resources(
        "AWS::S3::Bucket", {"Properties": {"VersioningConfiguration": Match.any_value()}}
    )
    assert len(found) == 1, found
    return next(iter(found))


def _statements(template: Any, policy_prefix: str) -> list[dict[str, Any]]:
    policies = template.find_resources("AWS::IAM::Policy")
    return per_resource(
        [
            s
            for name, p in policies.items()
            if name.startswith(policy_prefix)
            for s in p["Properties"]["PolicyDocument"]["Statement"]
        ]
    )


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def _objects(bucket: str, prefix: str) -> dict[str, Any]:
    return {"Fn::Join": ["", [{"Fn::GetAtt": [bucket, "Arn"]}, f"/{prefix}*"]]}


def test_files_under_the_input_prefix_of_a_versioned_bucket_invoke_the_function(template: Any) -> None:
    function, props = _function(template)
    bucket = _bucket(template)
    template.has_resource_properties(
        "Custom::S3BucketNotifications",
        {
            "BucketName": {"Ref": bucket},
            "NotificationConfiguration": {
                "LambdaFunctionConfigurations": [
                    {
                        "Events": ["s3:ObjectCreated:*"],
                        "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "in/"}]}},
                        "LambdaFunctionArn": {"Fn::GetAtt": [function, "Arn"]},
                    }
                ]
            },
        },
    )
    env = props["Properties"]["Environment"]["Variables"]
    assert env["TOOLPIPE_TRIGGER_BUCKET"] == {"Ref": bucket}
    assert (env["TOOLPIPE_TRIGGER_INPUT_PREFIX"], env["TOOLPIPE_TRIGGER_OUTPUT_PREFIX"]) == ("in/", "out/")
    assert env["TOOLPIPE_TRIGGER_PRINCIPAL"] == CONTEXT["trigger_principal"]
    assert env["TOOLPIPE_TRIGGER_SOURCES"] == "com.example.billing,com.example.crm"  # the handler's check
    # Asynchronous invocations: two retries, then the dead-letter queue.
    template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {
            "FunctionName": {"Ref": function},
            "MaximumRetryAttempts": 2,
            "DestinationConfig": {"OnFailure": {"Destination": Match.any_value()}},
        },
    )


def test_run_requested_events_on_the_stacks_bus_invoke_the_function_with_retries_and_a_dlq(
    template: Any,
) -> None:
    function, _ = _function(template)
    rules = template.find_resources(
        "AWS::Events::Rule", {"Properties": {"EventPattern": {"detail-type": ["RunRequested"]}}}
    )
    assert len(rules) == 1
    props = next(iter(rules.values()))["Properties"]
    # The sources the deployer named, never the run events' own: functions put those.
    assert props["EventPattern"] == {
        "source": ["com.example.billing", "com.example.crm"],
        "detail-type": ["RunRequested"],
    }
    [bus] = template.find_resources("AWS::Events::EventBus")
    assert props["EventBusName"] == {"Ref": bus}
    [target] = props["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [function, "Arn"]}
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 185}
    assert "DeadLetterConfig" in target


def test_a_schedule_puts_run_requested_on_the_bus_with_a_role_that_may_do_only_that(template: Any) -> None:
    [bus] = template.find_resources("AWS::Events::EventBus")
    schedules = template.find_resources("AWS::Scheduler::Schedule")
    assert len(schedules) == 1
    props = next(iter(schedules.values()))["Properties"]
    assert props["ScheduleExpression"] == "cron(0 7 * * ? *)"
    assert props["ScheduleExpressionTimezone"] == "Europe/Paris"
    target = props["Target"]
    assert target["Arn"] == {"Fn::GetAtt": [bus, "Arn"]}
    # The first source the stack accepts.
    assert target["EventBridgeParameters"] == {"DetailType": "RunRequested", "Source": "com.example.billing"}
    assert json.loads(target["Input"]) == {
        "agent": "assistant",
        "input": "what time is it",
        "timezone": "Europe/Paris",
    }
    role = target["RoleArn"]["Fn::GetAtt"][0]
    assume = template.find_resources("AWS::IAM::Role")[role]["Properties"]["AssumeRolePolicyDocument"]
    [trust] = assume["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    policies = [
        p
        for p in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
    ]
    statements = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]
    assert [(_actions(s), s["Resource"]) for s in statements] == [
        (["events:PutEvents"], {"Fn::GetAtt": [bus, "Arn"]})
    ]


def test_grants_stop_at_the_prefixes(template: Any) -> None:
    bucket = _bucket(template)
    on_inputs = [
        s
        for name, p in template.find_resources("AWS::IAM::Policy").items()
        # CDK's own handler, which sets the bucket's notification at deploy time.
        if "NotificationsHandler" not in name
        for s in per_resource(p["Properties"]["PolicyDocument"]["Statement"])
        if json.dumps([bucket, "Arn"]) in json.dumps(s)
    ]
    # Only these statements name the input bucket: no write on the inputs, and the one grant on
    # the bucket itself is a listing, to be told (404, not 403) that an input is gone.
    by_resource = {json.dumps(s["Resource"], sort_keys=True): sorted(_actions(s)) for s in on_inputs}
    inputs = json.dumps(_objects(bucket, "in/"), sort_keys=True)
    outputs = json.dumps(_objects(bucket, "out/"), sort_keys=True)
    whole = json.dumps({"Fn::GetAtt": [bucket, "Arn"]}, sort_keys=True)
    assert set(by_resource) == {inputs, outputs, whole}, by_resource
    assert by_resource[inputs] == ["s3:GetObject", "s3:GetObjectVersion"]
    assert by_resource[outputs] == ["s3:GetObject", "s3:PutObject"]
    assert by_resource[whole] == ["s3:ListBucket"]
    function, _ = _function(template)
    triggers = _statements(template, "TriggersFunctionServiceRoleDefaultPolicy")
    listers = [s for s in on_inputs if json.dumps(s["Resource"], sort_keys=True) == whole]
    assert all(s in triggers for s in listers)  # the triggers function's alone
    assert {"states:StartExecution"} <= {a for s in triggers for a in _actions(s)}
    assert not any(_objects(bucket, "out/") == s["Resource"] for s in triggers)  # writes nothing there
    # `read_input` runs in the runner, which reads no input: it reads the worker's presigned link.
    worker = _statements(template, "ToolWorker")
    assert [sorted(_actions(s)) for s in worker if s["Resource"] == _objects(bucket, "in/")] == [
        ["s3:GetObject", "s3:GetObjectVersion"]
    ]
    assert not any(s["Resource"] == _objects(bucket, "in/") for s in _statements(template, "ToolRunner"))
    orchestrator = _statements(template, "OrchestratorServiceRole")
    assert any(s["Resource"] == _objects(bucket, "out/") for s in orchestrator)  # the answer
    del function


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({**SCHEDULES[0], "name": "has space"}, "1-48 letters"),
        ({**SCHEDULES[0], "expression": "every day"}, "is not rate(...), cron(...) or at(...)"),
        ({**SCHEDULES[0], "agent": "bad name!"}, "agent"),
        ({**SCHEDULES[0], "input": " "}, "the input is blank"),
    ],
)
def test_a_bad_schedule_fails_the_synth(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        TriggerSchedule.parse(entry)


def test_the_stack_names_the_input_bucket_and_the_triggers_dlq_in_outputs(template: Any) -> None:
    outputs = template.to_json()["Outputs"]
    assert outputs["InputBucketName"]["Value"] == {"Ref": _bucket(template)}
    dlq = outputs["TriggerDeadLetterQueueUrl"]["Value"]["Ref"]
    assert template.find_resources("AWS::SQS::Queue")[dlq]["Properties"]["SqsManagedSseEnabled"] is True
