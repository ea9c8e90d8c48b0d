"""The local account's settings, as a new AWS account has them.

moto accepts any stage, but a new AWS account has no API Gateway CloudWatch role set in any
region (`aws apigateway get-account`: no `cloudwatchRoleArn`), and API Gateway then refuses to
create a REST API stage that writes logs to CloudWatch Logs: "CloudWatch Logs role ARN must be
set in account settings to enable logging", and the stack rolls back. Execution logs (a
`LoggingLevel` other than OFF, or `DataTraceEnabled`) and access logs to a log group both need
that role; access logs to Firehose and CloudWatch metrics (`MetricsEnabled`) do not. So the local
runtime starts from the same account: the only role set is one the template itself sets with an
`AWS::ApiGateway::Account`, and a template whose stage logs without one is refused, as AWS would.
"""

from collections.abc import Iterator
from typing import Any

from toolpipe.infra.local.template import Template, TemplateError

# API Gateway's own words, so that a search for what AWS said finds what the runtime said.
AWS_MESSAGE = "CloudWatch Logs role ARN must be set in account settings to enable logging"
# What a toolpipe stack turns to set the role (docs/operations/deploy.md).
SETTING = "api_gateway_cloudwatch_role"


def check(template: Template) -> None:
    """Refuse, in one line, a template that AWS would refuse in a new account.

    Raises:
        TemplateError: a stage logs, and the template sets no API Gateway CloudWatch role.
    """
    if _sets_cloudwatch_role(template):
        return
    for name, logging in _logging_stages(template):
        # The first is enough: AWS stops at the first stage it cannot create.
        raise TemplateError(
            f"{template.path}: stage {name} turns on {logging}, and a new AWS account has no API "
            f"Gateway CloudWatch role: AWS refuses it with '{AWS_MESSAGE}'. Set "
            f"{SETTING}=true (the stack creates the role and an AWS::ApiGateway::Account naming it), "
            "or turn the stage's logging off"
        )


def _sets_cloudwatch_role(template: Template) -> bool:
    return any(
        account.get("Properties", {}).get("CloudWatchRoleArn")
        for account in template.of_type("AWS::ApiGateway::Account").values()
    )


def _logging_stages(template: Template) -> Iterator[tuple[str, str]]:
    """Each REST API stage that logs with the account's role, and the first setting that does.

    A stage is an `AWS::ApiGateway::Stage`, or the one an `AWS::ApiGateway::Deployment` creates
    from its `StageDescription` (whose own `LoggingLevel` and `DataTraceEnabled` apply to every
    method)."""
    for name in template.of_type("AWS::ApiGateway::Stage"):
        logging = _logging(template.properties(name))
        if logging:
            yield name, logging
    for name in template.of_type("AWS::ApiGateway::Deployment"):
        stage = template.properties(name).get("StageDescription")
        if isinstance(stage, dict):
            logging = _logging(stage) or _method_logging(stage, "StageDescription")
            if logging:
                yield name, logging


def _logging(stage: dict[str, Any]) -> str | None:
    access = stage.get("AccessLogSetting")
    if (
        isinstance(access, dict)
        and access.get("DestinationArn")
        and not _to_firehose(access["DestinationArn"])
    ):
        return "AccessLogSetting (access logs to CloudWatch Logs)"
    for index, method in enumerate(stage.get("MethodSettings") or []):
        logging = _method_logging(method, f"MethodSettings[{index}]")
        if logging:
            return logging
    return None


def _method_logging(settings: dict[str, Any], where: str) -> str | None:
    level = settings.get("LoggingLevel")
    if level is not None and str(level).upper() != "OFF":
        return f"{where}.LoggingLevel {level} (execution logs)"
    if settings.get("DataTraceEnabled") in (True, "true", "True"):
        return f"{where}.DataTraceEnabled (execution logs)"
    return None


def _to_firehose(destination: Any) -> bool:
    # A literal ARN, or one joined from parts: Firehose's service name is among the strings.
    return ":firehose:" in str(destination)
