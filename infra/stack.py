"""The toolpipe stack: table, content bucket, tool queue and DLQ, three functions, the
Standard state machine from `infra.definition`, and a REST API."""

from pathlib import Path
from typing import Any

from aws_cdk import Acknowledgment, CfnOutput, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra import bundling, limits
from infra.constructs.events import RunEvents  # run events
from infra.constructs.triggers import TriggerOptions, Triggers  # triggers
from infra.definition import (
    EXECUTION_ENDED_ACTION,
    EXECUTION_ENDED_PATHS,
    ORCHESTRATOR_ARN,
    TOOL_QUEUE_URL,
    definition_json,
    execution_ended_pattern,
)

ROOT = Path(__file__).resolve().parent.parent
# One code asset for every function: our source only; dependencies come from layers.
_SOURCE_ONLY = ["**", "!functions", "!functions/**", "!shared", "!shared/**", "**/__pycache__", "**/*.pyc"]


def acknowledge(construct: Construct, id: str, reason: str) -> None:
    """A cdk-nag finding accepted on purpose; the reason is the justification reviewers read."""
    Validations.of(construct).acknowledge(Acknowledgment(id=id, reason=reason))


class ToolpipeStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_base_url: str = "",
        model_name: str = "gpt-4o-mini",
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]

        table = dynamodb.Table(
            self,
            "History",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            removal_policy=RemovalPolicy.RETAIN,
        )
        contents = s3.Bucket(
            self,
            "Contents",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            contents,
            id="AwsSolutions-S1",
            reason="Only toolpipe's own functions read and write this bucket; CloudTrail data events "
            "are the audit path, and access logs would double every tool-output write.",
        )

        dlq = sqs.Queue(
            self,
            "ToolDeadLetters",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        queue = sqs.Queue(
            self,
            "ToolCalls",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(limits.QUEUE_VISIBILITY_SECONDS),
            dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=limits.MAX_RECEIVES),
        )

        model_key = secretsmanager.Secret(
            self,
            "ModelApiKey",
            description="API key of the OpenAI-compatible model endpoint; set its value after deploying.",
        )
        acknowledge(
            model_key,
            id="AwsSolutions-SMG4",
            reason="A third-party API key: it is rotated at the model provider, not by a Lambda here.",
        )

        code = lambda_.Code.from_asset(str(ROOT), exclude=_SOURCE_ONLY)
        deps = lambda_.LayerVersion(
            self,
            "Dependencies",
            code=bundling.deps_layer_code(),
            compatible_runtimes=[bundling.RUNTIME],
            compatible_architectures=[bundling.ARCHITECTURE],
            description="aws-lambda-powertools, pydantic",
        )
        model_deps = lambda_.LayerVersion(
            self,
            "ModelClient",
            code=bundling.model_layer_code(),
            compatible_runtimes=[bundling.RUNTIME],
            compatible_architectures=[bundling.ARCHITECTURE],
            description="openai (the orchestrator only)",
        )
        common_env = {
            "TABLE_NAME": table.table_name,
            "BUCKET_NAME": contents.bucket_name,
            "POWERTOOLS_SERVICE_NAME": "toolpipe",
        }

        def function(
            name: str, handler: str, timeout: int, layers: list[lambda_.ILayerVersion], **env: str
        ) -> lambda_.Function:
            return lambda_.Function(
                self,
                name,
                runtime=bundling.RUNTIME,
                architecture=bundling.ARCHITECTURE,
                code=code,
                handler=handler,
                layers=layers,
                timeout=Duration.seconds(timeout),
                memory_size=512,
                tracing=lambda_.Tracing.ACTIVE,
                environment={**common_env, **env},
                log_group=logs.LogGroup(self, f"{name}Logs", retention=logs.RetentionDays.ONE_MONTH),
            )

        orchestrator = function(
            "Orchestrator",
            "functions.orchestrator.handler.lambda_handler",
            limits.ORCHESTRATOR_TIMEOUT_SECONDS,
            [deps, model_deps],
            OPENAI_API_KEY_SECRET_ARN=model_key.secret_arn,
            TOOLPIPE_MODEL=model_name,
            # Set here, not left to defaults: they must agree with the queue's (infra/limits.py).
            TOOLPIPE_CALL_TIMEOUT_SECONDS=str(limits.CALL_TIMEOUT_SECONDS),
            TOOLPIPE_CALL_HEARTBEAT_SECONDS=str(limits.CALL_HEARTBEAT_SECONDS),
            **({"OPENAI_BASE_URL": model_base_url} if model_base_url else {}),
        )
        worker = function(
            "ToolWorker",
            "functions.tool_worker.handler.lambda_handler",
            limits.WORKER_TIMEOUT_SECONDS,
            [deps],
            TOOLPIPE_HEARTBEAT_EVERY=str(limits.HEARTBEAT_EVERY_SECONDS),
        )
        worker.add_event_source(
            # Batch size 1: every tool call runs in its own invocation.
            sources.SqsEventSource(queue, batch_size=1, report_batch_item_failures=True)
        )
        api_fn = function("Api", "functions.api.handler.lambda_handler", limits.API_TIMEOUT_SECONDS, [deps])

        flow_logs = logs.LogGroup(self, "RunFlowLogs", retention=logs.RetentionDays.ONE_MONTH)
        machine = sfn.StateMachine(
            self,
            "RunFlow",
            definition_body=sfn.DefinitionBody.from_string(definition_json()),
            definition_substitutions={
                ORCHESTRATOR_ARN: orchestrator.function_arn,
                TOOL_QUEUE_URL: queue.queue_url,
            },
            state_machine_type=sfn.StateMachineType.STANDARD,
            tracing_enabled=True,
            # Execution data would put each SQS message, task token included, in the logs.
            logs=sfn.LogOptions(destination=flow_logs, level=sfn.LogLevel.ALL, include_execution_data=False),
        )
        # A definition given as a string grants nothing by itself: give it exactly what it calls.
        orchestrator.grant_invoke(machine)
        queue.grant_send_messages(machine)

        # Large history items live under runs/: each function gets the object actions it uses there.
        run_objects = contents.arn_for_objects("runs/*")
        for fn, actions in (
            (orchestrator, ["s3:GetObject", "s3:PutObject"]),
            (worker, ["s3:GetObject", "s3:PutObject"]),
            (api_fn, ["s3:GetObject", "s3:PutObject"]),
        ):
            fn.add_to_role_policy(iam.PolicyStatement(actions=actions, resources=[run_objects]))
            table.grant_read_write_data(fn)
        model_key.grant_read(orchestrator)
        machine.grant_task_response(worker)
        # Agent tools: the worker starts a child run, whose orchestrator answers the parent's task.
        machine.grant_start_execution(worker)
        worker.add_environment("STATE_MACHINE_ARN", machine.state_machine_arn)
        # A policy of its own, not the role's default one: the function depends on its default
        # policy and the state machine on the function, so a grant there would be a cycle.
        # It answers a parent run's task, and starts the fresh execution a long run continues in.
        iam.Policy(
            self,
            "OrchestratorAnswersParentTasks",
            roles=[orchestrator.role],  # type: ignore[list-item]
            statements=[
                iam.PolicyStatement(
                    actions=["states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"],
                    resources=[machine.state_machine_arn],
                ),
                iam.PolicyStatement(actions=["states:StartExecution"], resources=[machine.state_machine_arn]),
            ],
        )
        machine.grant_start_execution(api_fn)
        api_fn.add_environment("STATE_MACHINE_ARN", machine.state_machine_arn)
        # `cdk deploy -c admin_principal=arn:aws:iam::...`: who may read every run, not only their own.
        admin_principal = self.node.try_get_context("admin_principal")
        if admin_principal:
            api_fn.add_environment("TOOLPIPE_ADMIN_PRINCIPAL", str(admin_principal))

        # `cdk deploy -c mcp_header_secrets=arn1,arn2`: the secrets agents' MCP servers read their
        # headers from (`McpServer(headers_secret_arn=...)`). Only agent code names them, so the
        # deployer lists them here; each function that lists or calls MCP tools may read them.
        mcp_secrets = self.node.try_get_context("mcp_header_secrets")
        if mcp_secrets:
            arns = [arn.strip() for arn in str(mcp_secrets).split(",") if arn.strip()]
            for fn in (orchestrator, worker, api_fn):
                fn.add_to_role_policy(
                    iam.PolicyStatement(
                        actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                        resources=arns,
                    )
                )

        self._fail_runs_of_ended_executions(machine, orchestrator)
        # --- run events (infra/constructs/events.py): the bus, and who may publish to it ---
        run_events = RunEvents(self, "RunEvents")
        run_events.grant_publish(orchestrator, worker, api_fn)
        CfnOutput(self, "EventBusName", value=run_events.bus.event_bus_name)
        # --- end of run events ---

        # --- triggers (infra/constructs/triggers.py): files and RunRequested events start runs ---
        triggers = Triggers(
            self,
            "Triggers",
            bus=run_events.bus,
            table=table,
            contents=contents,
            machine=machine,
            orchestrator=orchestrator,
            worker=worker,
            code=code,
            layers=[deps],
            environment=common_env,
            options=TriggerOptions.from_context(self),
        )
        run_events.grant_publish(triggers.function)  # RunStarted for the runs it starts
        # --- end triggers ---
        api = self._rest_api(api_fn)

        for fn in (orchestrator, worker, api_fn):
            acknowledge(
                fn,
                id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
                reason="AWSLambdaBasicExecutionRole only lets the function write its own logs.",
            )
            acknowledge(
                fn,
                id="AwsSolutions-IAM5[Resource::*]",
                reason="X-Ray tracing actions (PutTraceSegments, PutTelemetryRecords) support no resource-level scope.",
            )
            acknowledge(
                fn,
                id=f"AwsSolutions-IAM5[Resource::<{self.get_logical_id(contents.node.default_child)}.Arn>/runs/*]",  # type: ignore[arg-type]
                reason="Object keys are made per run and message; the grant stops at the runs/ prefix of one bucket.",
            )
        acknowledge(
            machine,
            id="AwsSolutions-IAM5[Resource::*]",
            reason="Step Functions log delivery and X-Ray actions support no resource-level scope.",
        )
        acknowledge(
            machine,
            id=f"AwsSolutions-IAM5[Resource::<{self.get_logical_id(orchestrator.node.default_child)}.Arn>:*]",  # type: ignore[arg-type]
            reason="CDK's invoke grant covers the orchestrator's versions and aliases, that one function only.",
        )

        CfnOutput(self, "ApiUrl", value=api.url)
        CfnOutput(self, "StateMachineArn", value=machine.state_machine_arn)
        CfnOutput(self, "TableName", value=table.table_name)
        CfnOutput(self, "ModelApiKeySecretArn", value=model_key.secret_arn)
        CfnOutput(self, "ToolDeadLetterQueueUrl", value=dlq.queue_url)

    def _fail_runs_of_ended_executions(
        self, machine: sfn.StateMachine, orchestrator: lambda_.IFunction
    ) -> None:
        """An execution stopped by hand, or past its own timeout, ends where no state of it can
        mark its run: an EventBridge rule hands each such ending to the orchestrator, whose
        failure path (the one the state machine's Catch uses) is idempotent and answers a
        parent's call for a child run. The orchestrator, not a function of its own: it already
        has that path, the table and the right to answer parent tasks."""
        dead_letters = sqs.Queue(
            self,
            "ExecutionEndedDeadLetters",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        acknowledge(
            dead_letters,
            id="AwsSolutions-SQS3",
            reason="This queue is itself the dead-letter queue of the execution-ended rule's target.",
        )
        request = {"action": EXECUTION_ENDED_ACTION} | {
            name: events.EventField.from_path(path) for name, path in EXECUTION_ENDED_PATHS.items()
        }
        events.Rule(
            self,
            "ExecutionEnded",
            description="Fail the run of a toolpipe execution that ended FAILED, TIMED_OUT or ABORTED",
            event_pattern=events.EventPattern(
                **_pattern_kwargs(execution_ended_pattern(machine.state_machine_arn))
            ),
            targets=[
                targets.LambdaFunction(
                    orchestrator,
                    event=events.RuleTargetInput.from_object(request),
                    dead_letter_queue=dead_letters,
                    # A failed attempt is a throttle or an outage: retry for a day, then keep the
                    # event in the DLQ for an operator (the run stays "running" until then).
                    retry_attempts=185,
                    max_event_age=Duration.hours(24),
                )
            ],
        )
        CfnOutput(self, "ExecutionEndedDeadLetterQueueUrl", value=dead_letters.queue_url)

    def _rest_api(self, handler: lambda_.IFunction) -> apigw.RestApi:
        access_logs = logs.LogGroup(self, "ApiAccessLogs", retention=logs.RetentionDays.ONE_MONTH)
        api = apigw.RestApi(
            self,
            "RunsApi",
            description="Start and inspect toolpipe runs",
            cloud_watch_role=True,
            deploy_options=apigw.StageOptions(
                stage_name="v1",
                tracing_enabled=True,
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # request bodies carry prompts
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
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
            ),
            default_method_options=apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM),
        )
        run_request = api.add_model(
            "StartRunRequest",
            content_type="application/json",
            schema=apigw.JsonSchema(
                schema=apigw.JsonSchemaVersion.DRAFT4,
                type=apigw.JsonSchemaType.OBJECT,
                required=["prompt"],
                additional_properties=False,
                properties={
                    "prompt": apigw.JsonSchema(
                        type=apigw.JsonSchemaType.STRING, min_length=1, max_length=100_000
                    ),
                    "agent": apigw.JsonSchema(type=apigw.JsonSchemaType.STRING),
                    "timezone": apigw.JsonSchema(type=apigw.JsonSchemaType.STRING),
                    "tools": apigw.JsonSchema(
                        type=apigw.JsonSchemaType.ARRAY,
                        items=apigw.JsonSchema(type=apigw.JsonSchemaType.STRING),
                    ),
                    # Refused by the handler unless TOOLPIPE_ALLOW_RUN_MCP_SERVERS is set.
                    "mcp_servers": apigw.JsonSchema(
                        type=apigw.JsonSchemaType.ARRAY,
                        items=apigw.JsonSchema(type=apigw.JsonSchemaType.STRING),
                    ),
                },
            ),
        )
        validator = api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        integration = apigw.LambdaIntegration(handler)
        runs = api.root.add_resource("runs")
        runs.add_method(
            "POST",
            integration,
            request_models={"application/json": run_request},
            request_validator=validator,
        )
        run = runs.add_resource("{run_id}")
        run.add_method(
            "GET",
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
        acknowledge(
            api,
            id="AwsSolutions-COG4",
            reason="Callers sign requests with IAM (SigV4); a Cognito user pool is the operator's choice.",
        )
        acknowledge(
            api,
            id="AwsSolutions-APIG3",
            reason="WAF web ACLs are owned per organisation; associate yours with the v1 stage.",
        )
        acknowledge(
            api,
            id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]",
            reason="API Gateway's account-level CloudWatch role uses the AWS managed push-to-logs policy.",
        )
        return api


def _pattern_kwargs(pattern: dict[str, Any]) -> dict[str, Any]:
    """An EventBridge pattern as `events.EventPattern` keyword arguments."""
    return {name.replace("-", "_"): value for name, value in pattern.items()}
