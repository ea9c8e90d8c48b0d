"""The local account starts as a new AWS account does: no API Gateway CloudWatch role, so a
template whose stage logs without setting one is refused with AWS's message, in one line."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.local import account
from toolpipe.infra.local.runtime import LocalRuntime
from toolpipe.infra.local.template import PACKAGED, Template, TemplateError, load


def _accounts(resources: dict[str, Any]) -> list[str]:
    return [name for name, r in resources.items() if r["Type"] == "AWS::ApiGateway::Account"]


def test_the_default_template_sets_the_role_and_the_runtime_starts() -> None:
    with LocalRuntime(workers=0) as rt:
        [name] = _accounts(rt.template.resources)
        assert rt.template.properties(name)["CloudWatchRoleArn"]


def test_a_stage_that_logs_without_the_accounts_role_is_refused_as_aws_does(tmp_path: Path) -> None:
    data = json.loads(PACKAGED.read_text())
    [name] = _accounts(data["Resources"])
    del data["Resources"][name]
    for resource in data["Resources"].values():
        if resource.get("DependsOn"):
            resource["DependsOn"] = [d for d in resource["DependsOn"] if d != name]
    without = tmp_path / "without-account.template.json"
    without.write_text(json.dumps(data))
    load.cache_clear()
    with pytest.raises(TemplateError) as refused, LocalRuntime(workers=0, template_path=without):
        pass
    message = str(refused.value)
    assert "\n" not in message
    assert f"'{account.AWS_MESSAGE}'" in message
    [stage] = [n for n, r in data["Resources"].items() if r["Type"] == "AWS::ApiGateway::Stage"]
    assert f"stage {stage} turns on AccessLogSetting" in message
    assert "api_gateway_cloudwatch_role=true" in message


def _stage(**properties: Any) -> dict[str, Any]:
    return {"Type": "AWS::ApiGateway::Stage", "Properties": {"RestApiId": "api", **properties}}


@pytest.mark.parametrize(
    ("resource", "setting"),
    [
        (
            _stage(MethodSettings=[{"ResourcePath": "/*", "HttpMethod": "*", "LoggingLevel": "INFO"}]),
            "MethodSettings[0].LoggingLevel INFO",
        ),
        (
            _stage(MethodSettings=[{"ResourcePath": "/*", "HttpMethod": "*", "DataTraceEnabled": True}]),
            "MethodSettings[0].DataTraceEnabled",
        ),
        (_stage(AccessLogSetting={"DestinationArn": {"Fn::GetAtt": ["Logs", "Arn"]}}), "AccessLogSetting"),
        (
            {
                "Type": "AWS::ApiGateway::Deployment",
                "Properties": {"StageDescription": {"LoggingLevel": "ERROR"}},
            },
            "StageDescription.LoggingLevel",
        ),
    ],
)
def test_each_kind_of_stage_log_needs_the_accounts_role(resource: dict[str, Any], setting: str) -> None:
    template = Template(resources={"Stage": resource}, outputs={}, path=Path("t.json"))
    with pytest.raises(TemplateError, match=re.escape(f"stage Stage turns on {setting}")):
        account.check(template)
    role = {"Type": "AWS::IAM::Role", "Properties": {}}
    setting_it = {
        "Type": "AWS::ApiGateway::Account",
        "Properties": {"CloudWatchRoleArn": {"Fn::GetAtt": ["Role", "Arn"]}},
    }
    account.check(Template({"Stage": resource, "Role": role, "Account": setting_it}, {}, Path("t.json")))


def test_what_needs_no_role_is_not_refused() -> None:
    """Logging off, CloudWatch metrics and access logs to Firehose need no account role."""
    firehose = "arn:aws:firehose:eu-west-1:123456789012:deliverystream/amazon-apigateway-access"
    stages = {
        "Off": _stage(MethodSettings=[{"ResourcePath": "/*", "HttpMethod": "*", "LoggingLevel": "OFF"}]),
        "Metrics": _stage(MethodSettings=[{"ResourcePath": "/*", "HttpMethod": "*", "MetricsEnabled": True}]),
        "Firehose": _stage(AccessLogSetting={"DestinationArn": firehose}),
        "Bare": _stage(),
    }
    account.check(Template(resources=stages, outputs={}, path=Path("t.json")))
