"""What deploying the API touches beyond the API: the function's resource policy (one grant for
the whole API) and the region's API Gateway account setting (set by default, so that the stage's
logs work in a new account; left alone, with no stage logs, when asked)."""

import fnmatch
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.cdk.functions import API

# The `AWS::ApiGateway::Account` and its role, with the ids they had when the stack always made them.
ACCOUNT_ID, ROLE_ID = "RunsApiAccount733A908A", "RunsApiCloudWatchRole87D72B23"
PUSH_TO_LOGS = "AmazonAPIGatewayPushToCloudWatchLogs"


@pytest.fixture(scope="module")
def without_role(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """`cdk synth -c api_gateway_cloudwatch_role=false`, cdk-nag included: a finding raises."""
    from aws_cdk.assertions import Template

    from toolpipe.infra.cdk.app import build_app

    outdir = tmp_path_factory.mktemp("cdk.out")
    app, _ = build_app(bundle=False, outdir=str(outdir), context={"api_gateway_cloudwatch_role": "false"})
    yield Template.from_json(app.synth().get_stack_by_name("Toolpipe").template)


def _api_function(template: Any) -> str:
    [name] = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": API.handler}})
    return str(name)


def _api_permissions(template: Any) -> dict[str, Any]:
    function = _api_function(template)
    return {
        name: p["Properties"]
        for name, p in template.find_resources("AWS::Lambda::Permission").items()
        if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [function, "Arn"]}
        and p["Properties"]["Principal"] == "apigateway.amazonaws.com"
    }


def _source_arn(permission: dict[str, Any], api_id: str) -> str:
    """The permission's `SourceArn` for an API whose id is `api_id`, in eu-west-1."""
    values = {"AWS::Partition": "aws", "AWS::Region": "eu-west-1", "AWS::AccountId": "123456789012"}
    parts = permission["SourceArn"]["Fn::Join"][1]
    return "".join(
        p if isinstance(p, str) else values.get(p["Ref"], api_id if "Ref" in p else "?") for p in parts
    )


def _method_paths(template: Any) -> list[tuple[str, str, str]]:
    """Every method as (HTTP method, resource path, authorization type)."""
    resources = template.find_resources("AWS::ApiGateway::Resource")

    def path(parent: Any) -> str:
        if "Ref" not in parent:  # the API's root resource
            return ""
        props = resources[parent["Ref"]]["Properties"]
        return f"{path(props['ParentId'])}/{props['PathPart']}"

    return [
        (
            m["Properties"]["HttpMethod"],
            path(m["Properties"]["ResourceId"]) or "/",
            m["Properties"]["AuthorizationType"],
        )
        for m in template.find_resources("AWS::ApiGateway::Method").values()
    ]


def test_api_gateway_may_invoke_the_api_function_through_one_permission(template: Any) -> None:
    """One statement in the function's resource policy, whatever the number of routes (Lambda
    caps the policy at 20 KB; one per method and one per test invocation were 32 statements)."""
    [permission] = _api_permissions(template).values()
    [api] = template.find_resources("AWS::ApiGateway::RestApi")
    assert permission["Action"] == "lambda:InvokeFunction"
    assert permission["SourceArn"]["Fn::Join"][1][-2:] == [{"Ref": api}, "/*/*/*"]
    # Lambda matches SourceArn with ArnLike: `*` spans `/`. Every method, on stage v1 and in the
    # console's test invocations, the approval page's (no IAM, no key) among them.
    allowed = _source_arn(permission, "a1b2c3d4e5")
    methods = _method_paths(template)
    assert {(m, p) for m, p, auth in methods if auth == "NONE"} == {
        (method, "/approvals/{approval_id}/page") for method in ("GET", "HEAD", "POST")
    }
    for method, path, _ in methods:
        for stage in ("v1", "test-invoke-stage"):
            arn = f"arn:aws:execute-api:eu-west-1:123456789012:a1b2c3d4e5/{stage}/{method}{path}"
            assert fnmatch.fnmatchcase(arn, allowed), (arn, allowed)
    assert not fnmatch.fnmatchcase("arn:aws:execute-api:eu-west-1:123456789012:another/v1/GET/runs", allowed)
    # Every method reaches the function as a proxy integration.
    for method in template.find_resources("AWS::ApiGateway::Method").values():
        integration = method["Properties"]["Integration"]
        assert integration["Type"] == "AWS_PROXY" and integration["IntegrationHttpMethod"] == "POST"
        assert {"Fn::GetAtt": [_api_function(template), "Arn"]} in integration["Uri"]["Fn::Join"][1]


def test_routes_added_to_the_api_add_no_permission(tmp_path: Path) -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk.assertions import Template

    from toolpipe.infra.cdk.constructs.api import Api

    stack = Stack(App(outdir=str(tmp_path)), "Routes")
    handler = lambda_.Function(
        stack,
        "Handler",
        runtime=lambda_.Runtime.PYTHON_3_13,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context): pass"),
    )
    api = Api(stack, "Api", handler=handler)
    extra = api.rest_api.root.add_resource("extra")
    for method in ("GET", "PUT", "DELETE"):
        extra.add_method(method, api.integration)
    template = Template.from_stack(stack)
    assert len(template.find_resources("AWS::ApiGateway::Method")) == 25  # the API's 22, and 3
    template.resource_count_is("AWS::Lambda::Permission", 1)


def test_the_default_stack_sets_the_regions_api_gateway_role_and_keeps_it(template: Any) -> None:
    """A new account has no API Gateway CloudWatch role, and AWS refuses a stage that logs
    without one: by default the stack makes the role and sets it (the ids it had when the stack
    always made them), before the stage, which logs errors and access."""
    resources = template.to_json()["Resources"]
    account, role = resources[ACCOUNT_ID], resources[ROLE_ID]
    assert account["Type"] == "AWS::ApiGateway::Account"
    assert account["Properties"]["CloudWatchRoleArn"] == {"Fn::GetAtt": [ROLE_ID, "Arn"]}
    assert PUSH_TO_LOGS in str(role["Properties"]["ManagedPolicyArns"])
    # Kept when the stack goes or the option is turned off: the setting keeps working for the
    # region's other APIs.
    assert account["DeletionPolicy"] == role["DeletionPolicy"] == "Retain"
    [stage] = template.find_resources("AWS::ApiGateway::Stage").values()
    assert stage["DependsOn"] == [ACCOUNT_ID]
    assert stage["Properties"]["MethodSettings"] == [
        {
            "DataTraceEnabled": False,
            "HttpMethod": "*",
            "LoggingLevel": "ERROR",
            "ResourcePath": "/*",
            # The stage's throttle, in every auth mode (docs/concepts/limits.md "Quotas").
            "ThrottlingBurstLimit": 100,
            "ThrottlingRateLimit": 50,
        },
        *stage["Properties"]["MethodSettings"][1:],  # the approval page's throttles
    ]
    assert "DestinationArn" in stage["Properties"]["AccessLogSetting"]


def test_without_the_role_the_stage_logs_nothing_and_the_setting_is_left_alone(without_role: Any) -> None:
    """`-c api_gateway_cloudwatch_role=false`: no `AWS::ApiGateway::Account` and no role for it,
    and so no stage logs, which would need the account's role (the findings that says are
    acknowledged with the reason, cdk-nag's when synthesizing, checkov's in the metadata)."""
    without_role.resource_count_is("AWS::ApiGateway::Account", 0)
    for role in without_role.find_resources("AWS::IAM::Role").values():
        assert PUSH_TO_LOGS not in str(role["Properties"].get("ManagedPolicyArns"))
    [stage] = without_role.find_resources("AWS::ApiGateway::Stage").values()
    assert "AccessLogSetting" not in stage["Properties"] and "DependsOn" not in stage
    assert {m.get("LoggingLevel") for m in stage["Properties"]["MethodSettings"]} <= {"OFF", None}
    assert not any(m.get("DataTraceEnabled") for m in stage["Properties"]["MethodSettings"])
    assert stage["Properties"]["TracingEnabled"] is True
    skips = {s["id"] for s in stage["Metadata"]["checkov"]["skip"]}
    assert "CKV_AWS_76" in skips
    # No log group left for access logs nobody writes.
    groups = without_role.find_resources("AWS::Logs::LogGroup")
    assert not any(name.startswith("ApiAccessLogs") for name in groups)


def test_a_bad_account_setting_value_is_one_line(tmp_path: Path) -> None:
    from toolpipe.infra.cdk.app import build_app

    with pytest.raises(ValueError, match="api_gateway_cloudwatch_role must be true or false, not 'yes'"):
        build_app(bundle=False, outdir=str(tmp_path), context={"api_gateway_cloudwatch_role": "yes"})
