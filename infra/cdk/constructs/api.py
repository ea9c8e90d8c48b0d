"""The runs REST API and how callers authenticate to it."""

import enum
from dataclasses import dataclass
from typing import Any

from aws_cdk import Aws, RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from toolpipe.infra.cdk.constructs.nag import LOGS_ENCRYPTION, acknowledge, skip_checkov

STAGE_NAME = "v1"
# The approval page behind the signed link (README "The approval link") and its methods.
PAGE_RESOURCE = "/approvals/{approval_id}/page"
PAGE_METHODS = ("GET", "HEAD", "POST")
PAGE_RATE_PER_SECOND = 20.0
PAGE_BURST = 40


class ApiAuth(enum.StrEnum):
    """How callers authenticate. Either way the API function reads the caller from the request
    context API Gateway fills in, never from the request: the signer's ARN with IAM, the key's
    id (`api-key:<id>`) with an API key. That principal owns the runs it starts."""

    IAM = "iam"  # SigV4-signed requests; an IAM policy grants execute-api:Invoke
    API_KEY = "api_key"  # an `x-api-key` header; a usage plan also throttles each key

    @classmethod
    def parse(cls, value: object) -> "ApiAuth":
        try:
            return cls(str(value))
        except ValueError:
            choices = " or ".join(repr(a.value) for a in cls)
            raise ValueError(f"api_auth must be {choices}, not {value!r}") from None


# API Gateway's own answers (a method the API has not, a bad signature or key, the throttle, a
# body over the limit or parameters the request validator refuses), as the API answers its errors: the
# `ErrorBody` of docs/openapi.json, `{"statusCode", "message"}`. The types whose status is fixed;
# `$context.error.messageString` is API Gateway's message, quoted as JSON.
GATEWAY_ERRORS: dict[str, int] = {
    "MISSING_AUTHENTICATION_TOKEN": 403,
    "ACCESS_DENIED": 403,
    "INVALID_SIGNATURE": 403,
    "EXPIRED_TOKEN": 403,
    "INVALID_API_KEY": 403,
    "WAF_FILTERED": 403,
    "THROTTLED": 429,
    "QUOTA_EXCEEDED": 429,
    "REQUEST_TOO_LARGE": 413,
    "BAD_REQUEST_BODY": 400,
    "BAD_REQUEST_PARAMETERS": 400,
}


@dataclass(frozen=True)
class Throttle:
    """The API's request limits: a steady rate and a burst above it. They apply to the stage
    (every method, all callers together) in every auth mode, and with API keys to each key too
    (its usage plan). Over them API Gateway answers 429 itself."""

    # The whole stage's: room for many callers polling their runs (GET), well under the
    # account's 10,000 a second that every API of the region shares.
    rate_per_second: float = 50.0
    burst: int = 100

    def __post_init__(self) -> None:
        if not self.rate_per_second > 0:
            raise ValueError(
                f"the API throttle rate must be above 0 requests a second, not {self.rate_per_second}"
            )
        if self.burst < 1:
            raise ValueError(f"the API throttle burst must be at least 1 request, not {self.burst}")


class Api(Construct):
    """`POST /runs`, `GET /runs`, `GET /runs/{run_id}`, `POST /runs/{run_id}/cancel`,
    `GET /runs/{run_id}/messages[/{seq}]`, `GET /runs/{run_id}/timeline`, the timeline pages
    `GET /ui/runs[/{run_id}]`, `GET /approvals[/{approval_id}]`,
    `POST /approvals/{approval_id}/approve|deny|answer`,
    `POST /runs/{run_id}/calls/{call_id}/result` and `GET /openapi.json` on stage `v1`,
    all proxied to the API function. IAM authorization on every method by default; with
    `auth=ApiAuth.API_KEY`, an API key on every method instead, and a usage plan throttling it.
    The stage is throttled in either mode (`throttle`, `Throttle()` by default)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: lambda_.IFunction,
        auth: ApiAuth = ApiAuth.IAM,
        throttle: Throttle | None = None,
        cloud_watch_role: bool = True,
    ) -> None:
        """`cloud_watch_role`: create the role API Gateway writes logs with and set it as the
        region's API Gateway account setting (`AWS::ApiGateway::Account`, one per account and
        region), so that the stage's execution and access logs work in a new account, which has
        none. False leaves the account setting alone, and the stage then writes no logs: AWS
        refuses a stage that logs while the region has no role set (docs/operations/deploy.md
        "API Gateway's CloudWatch role")."""
        super().__init__(scope, construct_id)
        throttle = throttle or Throttle()
        self.rest_api = apigw.RestApi(
            self,
            "RunsApi",
            description="Start and inspect toolpipe runs",
            # The role is kept when the stack goes or the option is turned off (RETAIN), and so is
            # the account setting naming it: the region's other APIs go on logging with it.
            cloud_watch_role=cloud_watch_role,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN if cloud_watch_role else None,
            deploy_options=apigw.StageOptions(
                stage_name=STAGE_NAME,
                # Every method, all callers together, whatever the auth mode: one caller's burst
                # is answered 429 by API Gateway before it reaches (and uses the concurrency of)
                # the API function.
                throttling_rate_limit=throttle.rate_per_second,
                throttling_burst_limit=throttle.burst,
                # The approval page takes no IAM signature or key (the link's signature is the
                # credential): a limit of its own, well above what people clicking need.
                method_options={
                    f"{PAGE_RESOURCE}/{method}": apigw.MethodDeploymentOptions(
                        throttling_rate_limit=PAGE_RATE_PER_SECOND, throttling_burst_limit=PAGE_BURST
                    )
                    for method in PAGE_METHODS
                },
                tracing_enabled=True,
                data_trace_enabled=False,  # request bodies carry prompts
                **(self._logs() if cloud_watch_role else {"logging_level": apigw.MethodLoggingLevel.OFF}),
            ),
            default_method_options=(
                apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM)
                if auth is ApiAuth.IAM
                else apigw.MethodOptions(
                    authorization_type=apigw.AuthorizationType.NONE, api_key_required=True
                )
            ),
        )
        # One permission for the whole API (its execute-api ARN, every stage, method and path),
        # not one per method and one more per method for the console's test invocations: those
        # were 32 statements, ~14 KB of the function's 20 KB resource-policy limit, ~0.9 KB for
        # each route added (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
        # The API already decides who may call each method; the function trusts only this API.
        # Routes added later (a plugin's) use `integration` too, and add no permission.
        self.integration = apigw.LambdaIntegration(handler, scope_permission_to_method=False)
        self._routes(self.integration)
        for name, status in GATEWAY_ERRORS.items():
            self.rest_api.add_gateway_response(
                f"Error{name.title().replace('_', '')}",
                type=apigw.ResponseType.of(name),
                status_code=str(status),
                templates={
                    "application/json": f'{{"statusCode": {status}, "message": $context.error.messageString}}'
                },
            )
        skip_checkov(
            self.rest_api.deployment_stage,
            "CKV_AWS_120",
            "Answers are per caller and change as a run goes on (GET /runs/{id}): a cache would serve "
            "stale or another caller's states, and a cache cluster bills by the hour.",
        )
        acknowledge(
            self.rest_api,
            id="AwsSolutions-COG4",
            reason="Callers authenticate with IAM (SigV4) or an API key, as the deployer chose; a Cognito "
            "user pool is the operator's choice.",
        )
        acknowledge(
            self.rest_api,
            id="AwsSolutions-APIG3",
            reason="WAF web ACLs are owned per organisation; associate yours with the v1 stage.",
        )
        if cloud_watch_role:
            acknowledge(
                self.rest_api,
                id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]",
                reason="API Gateway's account-level CloudWatch role uses the AWS managed push-to-logs policy.",
            )
        else:
            self._no_logs()

        # The API's base URL with its stage, from the API's id alone (no stage reference: the
        # orchestrator needs it, and a reference to the stage would be a dependency cycle).
        self.base_url = (
            f"https://{self.rest_api.rest_api_id}.execute-api.{Aws.REGION}.{Aws.URL_SUFFIX}/{STAGE_NAME}"
        )

        self.api_key: apigw.IApiKey | None = None
        self.usage_plan: apigw.UsagePlan | None = None
        if auth is ApiAuth.API_KEY:
            self._api_key(throttle)

    def _logs(self) -> dict[str, Any]:
        """The stage's logs, which API Gateway writes with the account setting's role: execution
        logs (errors only) and access logs to a log group of their own."""
        access_logs = logs.LogGroup(self, "ApiAccessLogs", retention=logs.RetentionDays.ONE_MONTH)
        skip_checkov(access_logs, "CKV_AWS_158", LOGS_ENCRYPTION)
        return {
            "logging_level": apigw.MethodLoggingLevel.ERROR,
            "access_log_destination": apigw.LogGroupLogDestination(access_logs),
            "access_log_format": apigw.AccessLogFormat.json_with_standard_fields(
                caller=True,
                http_method=True,
                ip=True,
                protocol=True,
                request_time=True,
                resource_path=True,
                response_length=True,
                status=True,
                user=True,
            ),
        }

    def _no_logs(self) -> None:
        """The deployer kept the stack off the account setting (`cloud_watch_role=False`): the
        stage logs nothing, as any log would need the role that setting names."""
        reason = (
            "The deployer chose api_gateway_cloudwatch_role=false: the stack leaves the region's API "
            "Gateway account setting alone, and without the role it names AWS refuses a stage that "
            "logs. Lambda logs each invocation of the API function, which logs the runs it starts or "
            "changes and every failure; the stage is still traced (X-Ray)."
        )
        acknowledge(self.rest_api, id="AwsSolutions-APIG1", reason=reason)
        acknowledge(self.rest_api, id="AwsSolutions-APIG6", reason=reason)
        skip_checkov(self.rest_api.deployment_stage, "CKV_AWS_76", reason)

    def _api_key(self, throttle: Throttle) -> None:
        """One key (its value generated by API Gateway) in a usage plan that throttles it."""
        self.usage_plan = self.rest_api.add_usage_plan(
            "UsagePlan",
            description="toolpipe runs API: per-key throttling",
            throttle=apigw.ThrottleSettings(rate_limit=throttle.rate_per_second, burst_limit=throttle.burst),
            api_stages=[apigw.UsagePlanPerApiStage(api=self.rest_api, stage=self.rest_api.deployment_stage)],
        )
        self.api_key = self.rest_api.add_api_key(
            "ApiKey", description="Calls the toolpipe runs API; its id is the caller that owns the runs"
        )
        self.usage_plan.add_api_key(self.api_key)
        acknowledge(
            self.rest_api,
            id="AwsSolutions-APIG4",
            reason="The deployer chose API keys (api_auth='api_key'): every method requires a key, a "
            "usage plan throttles it, and the key's id is the caller that owns its runs.",
        )

    def _routes(self, integration: apigw.Integration) -> None:
        api = self.rest_api
        # Bodies are validated by the API function alone, against the pydantic models the
        # served OpenAPI document is generated from: one schema, and the same field-level 400 on
        # AWS as on the local runtime (which has no API Gateway in front). A gateway model was a
        # second, hand-written copy that drifted (it refused `max_duration_waits`), and answered
        # only "Invalid request body". The validator checks the required parameters.
        validator = api.add_request_validator(
            "Validator", validate_request_body=False, validate_request_parameters=True
        )
        acknowledge(
            self.rest_api,
            id="AwsSolutions-APIG2",
            reason="Request bodies are validated by the API function against the models the OpenAPI "
            "document is generated from, with a field-level 400; the gateway validates parameters.",
        )
        runs = api.root.add_resource("runs")
        runs.add_method(
            "POST",
            integration,
            request_validator=validator,
        )
        runs.add_method(
            "GET",
            integration,
            request_validator=validator,
            request_parameters={
                f"method.request.querystring.{name}": False
                for name in ("status", "agent", "caller", "limit", "next")
            },
        )
        api.root.add_resource("openapi.json").add_method("GET", integration, request_validator=validator)
        run = runs.add_resource("{run_id}")
        # Resume and fork (docs/concepts/runs.md): bodies the handler validates, as cancel's.
        for action in ("cancel", "resume", "fork"):
            run.add_resource(action).add_method(
                "POST",
                integration,
                request_validator=validator,
                request_parameters={"method.request.path.run_id": True},
            )
        for method in ("GET", "DELETE"):
            run.add_method(
                method,
                integration,
                request_validator=validator,
                request_parameters={"method.request.path.run_id": True},
            )
        messages = run.add_resource("messages")
        messages.add_method(
            "GET",
            integration,
            request_validator=validator,
            request_parameters={"method.request.path.run_id": True},
        )
        messages.add_resource("{seq}").add_method(
            "GET",
            integration,
            request_validator=validator,
            request_parameters={"method.request.path.run_id": True, "method.request.path.seq": True},
        )
        # A run you can see (README "The timeline page"): its timeline as JSON, its page and the
        # runs list (HTML), behind the same authorization as every other route. GET only.
        run.add_resource("timeline").add_method(
            "GET",
            integration,
            request_validator=validator,
            request_parameters={"method.request.path.run_id": True},
        )
        ui_runs = api.root.add_resource("ui").add_resource("runs")
        ui_runs.add_method(
            "GET",
            integration,
            request_validator=validator,
            request_parameters={"method.request.querystring.next": False},
        )
        ui_runs.add_resource("{run_id}").add_method(
            "GET",
            integration,
            request_validator=validator,
            request_parameters={"method.request.path.run_id": True},
        )
        # A person's decisions on calls that wait for approval (README "Human approval").
        approvals = api.root.add_resource("approvals")
        approvals.add_method(
            "GET",
            integration,
            request_validator=validator,
            request_parameters={"method.request.querystring.status": False},
        )
        approval = approvals.add_resource("{approval_id}")
        path = {"method.request.path.approval_id": True}
        approval.add_method("GET", integration, request_validator=validator, request_parameters=path)
        for action in ("approve", "deny", "answer"):
            approval.add_resource(action).add_method(
                "POST", integration, request_validator=validator, request_parameters=path
            )
        # A client-executed call's result, posted by the caller's program (README "Deferred tools").
        result = run.add_resource("calls").add_resource("{call_id}").add_resource("result")
        result.add_method(
            "POST",
            integration,
            request_validator=validator,
            request_parameters={"method.request.path.run_id": True, "method.request.path.call_id": True},
        )
        # The page a person opens from the signed link: no IAM, no key. The HMAC signature
        # over the approval id, its arguments' hash and the expiry is the credential, checked
        # by the API function before anything is shown or decided; the forms also need a CSRF
        # cookie and token.
        page = approval.add_resource("page")
        for method in PAGE_METHODS:
            page_method = page.add_method(
                method,
                integration,
                request_validator=validator,
                request_parameters=path,
                authorization_type=apigw.AuthorizationType.NONE,
                api_key_required=False,
            )
            acknowledge(
                page_method,
                id="AwsSolutions-APIG4",
                reason="The approval page is opened from a link in an email or chat by a person without "
                "AWS credentials; the link's HMAC signature (key in Secrets Manager, bound to the "
                "approval, its arguments and its expiry) is the credential, and a POST also needs a "
                "CSRF cookie and token. GET and HEAD never change state.",
            )
            acknowledge(
                page_method,
                id="AwsSolutions-COG4",
                reason="The approval page's credential is the signed link, not a Cognito user.",
            )
            skip_checkov(
                page_method,
                "CKV_AWS_59",
                "The approval page is opened from an emailed link by a person without AWS credentials: "
                "the link's HMAC signature, checked by the API function, is the credential (a POST also "
                "needs a CSRF cookie and token). Every other method needs IAM or an API key.",
            )
