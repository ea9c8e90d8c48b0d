"""The three Lambda functions (`infra/cdk/functions.py` names them) and exactly what each may do."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from toolpipe.infra.cdk import app_code, bundling, limits
from toolpipe.infra.cdk import functions as specs
from toolpipe.infra.cdk.constructs.model_key import grant_decrypt
from toolpipe.infra.cdk.constructs.nag import (
    AWS_MANAGED_SECRET_KEY,
    ENVIRONMENT_HOLDS_NO_SECRET,
    LOGS_ENCRYPTION,
    NO_RESERVED_CONCURRENCY,
    NO_VPC,
    acknowledge,
    logical_id,
    skip_checkov,
)
from toolpipe.infra.cdk.constructs.otel import OtelExport, is_otel_setting, otel_environment, telemetry_layers
from toolpipe.infra.cdk.constructs.storage import Storage, grant_run_objects
from toolpipe.infra.cdk.constructs.tool_queue import ToolQueue
from toolpipe.shared.app_ref import APP_ENV
from toolpipe.shared.costs.prices import PRICES_ENV, prices_json
from toolpipe.shared.runs.tool_runner_client import OVERFLOW_PREFIX
from toolpipe.shared.settings import QuotaSettings, RateSettings

# The tool queue's event source runs at most this many tool workers at once by default (SQS
# allows 2 to 1,000): https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html
WORKER_MAX_CONCURRENCY = 20

# What the rate governor asks of its table (shared/runs/rate_governor.py): consistent reads of a
# budget and a run's record, the run's record written, and the transaction of both (IAM
# authorizes TransactWriteItems as the item actions in it). No scan, query or delete.
RATE_BUDGET_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")


@dataclass(frozen=True)
class ReservedConcurrency:
    """What the API and the orchestrator each reserve of the account's Lambda concurrency (None:
    nothing, the default). Reserved, a function is never throttled by the others' load (a tool
    fan-out) and never uses more than that. Lambda refuses a reservation that leaves under 100
    unreserved in the account, and new accounts may have 10 in all: ask for a higher quota first
    (README "Quotas")."""

    api: int | None = None
    orchestrator: int | None = None

    def __post_init__(self) -> None:
        for name in ("api", "orchestrator"):
            value = getattr(self, name)
            if value is not None and not 1 <= value <= MAX_RESERVED_CONCURRENCY:
                raise ValueError(
                    f"{name}_reserved_concurrency must be 1 to {MAX_RESERVED_CONCURRENCY:,} (or unset), not {value}"
                )


def _number_text(value: float) -> str:
    """A rate as the environment holds it: 60, not 60.0."""
    return str(int(value)) if float(value).is_integer() else str(value)


def _prices_environment(prices: Mapping[str, Any] | None) -> dict[str, str]:
    """The API's price table override, checked at synth (none: the defaults)."""
    return {PRICES_ENV: prices_json(prices)} if prices else {}


# Lambda's own bound is the account's concurrency quota; this catches a typo before CloudFormation.
MAX_RESERVED_CONCURRENCY = 10_000

# The tool runner's log group receives what tool code itself prints or logs, which toolpipe does
# not control: the reason shared by the other log groups ("no payloads") would not hold.
TOOL_OUTPUT_LOGS = (
    "Tool code's own output (print, logging) lands here and may hold what a tool read or returned: "
    "CloudWatch Logs encrypts it at rest with keys it manages, it is kept a month, and only principals "
    "the deployer grants logs:GetLogEvents read it. A customer-managed key is the deployer's option "
    "(its key policy must admit the Logs service; KMS charges per request)."
)


class Functions(Construct):
    """The orchestrator, the tool worker (fed by the tool queue) and the API function, with
    least-privilege grants on the storage. What they may do with the state machine comes
    later, from `allow_runs`: the state machine is built from the orchestrator's ARN."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        storage: Storage,
        tool_queue: ToolQueue,
        model_name: str,
        model_base_url: str = "",
        model_key: secretsmanager.ISecret | None = None,
        model_key_kms_key_arn: str | None = None,
        admin_principal: str | None = None,
        link_edits: bool = False,
        mcp_header_secrets: Sequence[str] = (),
        app: str,
        packages: Sequence[str] = (),
        requirements_lock: Path | None = None,
        tracing: bool = True,
        otel: OtelExport | None = None,
        quotas: QuotaSettings | None = None,
        model_rate: RateSettings | None = None,
        reserved_concurrency: "ReservedConcurrency | None" = None,
        worker_max_concurrency: int | None = WORKER_MAX_CONCURRENCY,
        prices: Mapping[str, Any] | None = None,
        runners: Sequence[str] = (),
    ) -> None:
        """`runners`: the named tool runners (`@tool(runner=...)`), a function and role each
        beside the default runner's, checked by the pipeline. `quotas`: the per-caller quotas on `POST /runs` (none by default), set in the API's
        environment. `reserved_concurrency`: what the API and the orchestrator each reserve of
        the account's Lambda concurrency (none by default). `worker_max_concurrency`: the most
        tool workers the tool queue's event source runs at once (None: as many as Lambda scales to).
        `prices`: USD prices laid over the default price table of a run's cost (shared/costs/
        prices.py: another region, your rates), checked here and set in the API's environment."""
        super().__init__(scope, construct_id)
        reserved = reserved_concurrency or ReservedConcurrency()
        rate = model_rate or RateSettings()
        # Public, like the code and layers: a function built elsewhere from them traces alike.
        self.tracing = lambda_.Tracing.ACTIVE if tracing else lambda_.Tracing.DISABLED
        # Public, with the layers and the environment below: a construct that adds a function of
        # its own (a trigger's) builds it from the same code, layers and settings.
        # One code asset for every function: toolpipe's runtime and your app's package
        # (infra/cdk/app_code.py); third-party packages come from the layers.
        self.code = lambda_.Code.from_asset(str(app_code.stage_code(app, packages)))
        self.dependencies = lambda_.LayerVersion(
            self,
            "Dependencies",
            code=bundling.deps_layer_code(requirements_lock),
            compatible_runtimes=[bundling.RUNTIME],
            compatible_architectures=[bundling.ARCHITECTURE],
            description="aws-lambda-powertools, pydantic",
        )
        self.model_client = lambda_.LayerVersion(
            self,
            "ModelClient",
            code=bundling.model_layer_code(),
            compatible_runtimes=[bundling.RUNTIME],
            compatible_architectures=[bundling.ARCHITECTURE],
            description="openai (the orchestrator only)",
        )
        # Beside every function but the tool runner, when traces go to a collector layer.
        self.telemetry_layers = telemetry_layers(self, otel, tracing)
        # What every function reads: where the history lives.
        self.environment = {
            "TABLE_NAME": storage.table.table_name,
            "BUCKET_NAME": storage.bucket.bucket_name,
            "POWERTOOLS_SERVICE_NAME": "toolpipe",
            APP_ENV: app,
            # How long an ended run is kept: the functions that end runs stamp it on their items.
            "TOOLPIPE_RETENTION_DAYS": str(storage.retention_days),
            # Without it Powertools' Tracer would still load X-Ray on Lambda (shared/tracing.py).
            **({} if tracing else {"POWERTOOLS_TRACE_DISABLED": "true"}),
            # Where run spans go (shared/telemetry); unset, nothing traces and nothing is loaded.
            **otel_environment(otel),
            # pydantic's plugins off (the runners, where your tools run, keep them: below).
            **specs.PLUGINS_OFF,
        }

        self.orchestrator = self._function(
            specs.ORCHESTRATOR,
            [self.dependencies, self.model_client, *self.telemetry_layers],
            {
                "TOOLPIPE_MODEL": model_name,
                # Set here, not left to defaults: they must agree with the queue's (infra/cdk/limits.py).
                "TOOLPIPE_CALL_TIMEOUT_SECONDS": str(limits.CALL_TIMEOUT_SECONDS),
                "TOOLPIPE_CALL_HEARTBEAT_SECONDS": str(limits.CALL_HEARTBEAT_SECONDS),
                "TOOLPIPE_APPROVAL_TIMEOUT_SECONDS": str(limits.APPROVAL_TIMEOUT_SECONDS),
                **({"OPENAI_BASE_URL": model_base_url} if model_base_url else {}),
                # None: an endpoint that takes no key (`model_key_secret_arn=none`).
                **({"OPENAI_API_KEY_SECRET_ARN": model_key.secret_arn} if model_key is not None else {}),
                # The model's rate governor (shared/runs/rate_governor.py): always set, 0 when off,
                # so the local runtime follows the template, not the shell.
                "TOOLPIPE_MODEL_RATE_TABLE": storage.rate_table.table_name,
                "TOOLPIPE_MODEL_RATE_PER_MINUTE": _number_text(rate.per_minute),
                "TOOLPIPE_MODEL_RATE_BURST": str(rate.burst),
                "TOOLPIPE_MODEL_RATE_MAX_WAIT": str(rate.max_wait_seconds),
            },
            reserved=reserved.orchestrator,
        )
        self.tool_worker = self._function(
            specs.TOOL_WORKER,
            [self.dependencies, *self.telemetry_layers],
            {"TOOLPIPE_HEARTBEAT_EVERY": str(limits.HEARTBEAT_EVERY_SECONDS)},
        )
        self.tool_worker.add_event_source(
            # Batch size 1: every tool call runs in its own invocation. A maximum concurrency: one
            # run's fan-out (up to 40 calls a turn) waits in the queue instead of taking the
            # account's concurrency (and the tool runner's, one invocation per worker) from the
            # API and the orchestrator. Messages over it stay queued, not throttled and retried.
            sources.SqsEventSource(
                tool_queue.queue,
                batch_size=1,
                report_batch_item_failures=True,
                max_concurrency=worker_max_concurrency,
            )
        )
        # Tool code runs here, invoked by the worker once per call: each runner's role holds no
        # key to the pipeline (no table, task token, event bus or model key), only what a deployer
        # grants its tools (`tool_runner(name).add_to_role_policy`) and one prefix to put a long
        # answer under. A tool runs in the runner it names (`@tool(runner=...)`), else the default.
        self.tool_runner = self._tool_runner(specs.TOOL_RUNNER, storage, worker_max_concurrency)
        self.tool_runners = {
            name: self._tool_runner(specs.runner_spec(name), storage, worker_max_concurrency)
            for name in runners
        }
        self.tool_worker.add_to_role_policy(
            iam.PolicyStatement(
                # Read back, then deleted (a lifecycle rule expires what a crash leaves).
                actions=["s3:GetObject", "s3:DeleteObject"],
                resources=[storage.bucket.arn_for_objects(f"{OVERFLOW_PREFIX}*")],
            )
        )
        self.tool_worker.add_environment("TOOLPIPE_TOOL_RUNNER", self.tool_runner.function_name)
        if self.tool_runners:
            # One compact JSON object (a name and a function name each): the worker invokes the
            # function of the runner a tool names. Its size counts in the 4 KB of the worker's
            # environment, which aws_limits checks with the longest names deploy time could give.
            self.tool_worker.add_environment(
                "TOOLPIPE_TOOL_RUNNERS",
                Stack.of(self).to_json_string(
                    {name: fn.function_name for name, fn in self.tool_runners.items()}
                ),
            )
        self.tool_worker.add_environment(
            "TOOLPIPE_TOOL_RUNNER_TIMEOUT", str(specs.TOOL_RUNNER.timeout_seconds)
        )
        # What each of the runner's invocations costs a run (shared/costs): the worker counts them.
        self.tool_worker.add_environment("TOOLPIPE_TOOL_RUNNER_MEMORY", str(specs.TOOL_RUNNER.memory_mb))
        acknowledge(
            self.tool_worker,
            id=f"AwsSolutions-IAM5[Resource::<{logical_id(storage.bucket)}.Arn>/{OVERFLOW_PREFIX}*]",
            reason="The worker reads the long answer of a call it invoked the runner for, at the key it made.",
        )
        q = quotas or QuotaSettings()
        self.api = self._function(
            specs.API,
            [self.dependencies, *self.telemetry_layers],
            {
                # Always set, 0 when off: the local runtime reads the same values (README "Quotas").
                "TOOLPIPE_QUOTA_STARTS_PER_MINUTE": str(q.starts_per_minute),
                "TOOLPIPE_QUOTA_RUNNING": str(q.running),
                **_prices_environment(prices),
            },
            reserved=reserved.api,
        )
        skip_checkov(
            self.orchestrator,
            "CKV_AWS_116",
            "Step Functions invokes it synchronously (a failure reaches the state machine's Catch); its "
            "one asynchronous caller, the execution-ended rule, sends failures to an on-failure "
            "destination (infra/cdk/constructs/run_flow.py).",
        )
        if worker_max_concurrency is not None:
            skip_checkov(
                self.tool_worker,
                "CKV_AWS_115",
                f"Its SQS event source runs at most {worker_max_concurrency} at once (MaximumConcurrency), "
                "holding the rest in the queue rather than throttling them; a reservation would take as "
                "much from the account's pool.",
            )
        skip_checkov(
            self.tool_worker,
            "CKV_AWS_116",
            "Invoked synchronously by its SQS event source: a failed message returns to the tool queue, "
            "whose redrive policy moves it to the tool dead-letter queue.",
        )
        skip_checkov(
            self.api,
            "CKV_AWS_116",
            "API Gateway invokes it synchronously: a failure is the caller's HTTP error, nothing to redrive.",
        )
        # The HMAC key of approval links (README "The approval link"): generated by Secrets
        # Manager, read by the two functions that use it, the orchestrator (signs the link
        # `ApprovalRequested` carries) and the API (checks the links and the page's CSRF tokens).
        self.approval_signing_key = secretsmanager.Secret(
            self,
            "ApprovalSigningKey",
            description="HMAC key of toolpipe's signed approval links. Rotate it with put-secret-value: "
            "links signed with the previous version keep working until they expire.",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=64, exclude_punctuation=True, include_space=False
            ),
            # Deleted with the stack, unlike the model key: generated here, it only signs links to
            # this stack's API, which goes with it, and a stack made again makes its own; kept, it
            # would be an orphan holding key material. Secrets Manager keeps a deleted secret
            # recoverable for 30 days.
            removal_policy=RemovalPolicy.DESTROY,
        )
        for fn in (self.orchestrator, self.api):
            self.approval_signing_key.grant_read(fn)
            fn.add_environment(
                "TOOLPIPE_APPROVAL_SIGNING_KEY_SECRET_ARN", self.approval_signing_key.secret_arn
            )
        acknowledge(
            self.approval_signing_key,
            id="AwsSolutions-SMG4",
            reason="Rotated by hand (put-secret-value), not by a rotation Lambda: the value is a random "
            "HMAC key with no service to update. The functions verify with the AWSCURRENT and "
            'AWSPREVIOUS versions and read them again every 5 minutes (README "The approval link").',
        )
        skip_checkov(self.approval_signing_key, "CKV_AWS_149", AWS_MANAGED_SECRET_KEY)

        # Large history items live under runs/: each function gets the object actions it uses
        # there; each may end a run (and tag its objects for expiry); the API also deletes runs.
        for fn in self.all:
            grant_run_objects(fn, storage.bucket, delete=fn is self.api)
            storage.table.grant_read_write_data(fn)
        # Only the orchestrator calls the model, so only it meets the rate budgets: exactly the
        # governor's requests (its transaction is authorized as the UpdateItem and PutItem in it).
        storage.rate_table.grant(self.orchestrator, *RATE_BUDGET_ACTIONS)
        if model_key is not None:
            # GetSecretValue on exactly that secret (and kms:Decrypt through Secrets Manager when
            # it is encrypted with a key of yours); only the orchestrator calls the model.
            model_key.grant_read(self.orchestrator)
            if model_key_kms_key_arn is not None:
                grant_decrypt(self.orchestrator, model_key_kms_key_arn, model_key.secret_arn)
        # Who may read every run, not only their own (`cdk deploy -c admin_principal=arn:...`).
        if admin_principal:
            self.api.add_environment("TOOLPIPE_ADMIN_PRINCIPAL", admin_principal)
        # Whoever holds an approval link may also edit the arguments (`-c link_edits=true`); off,
        # the API refuses an edit from a link (shared/settings.py ApprovalLinkSettings). Always
        # set, so the template says which, and the local runtime follows it, not the shell's.
        self.api.add_environment("TOOLPIPE_LINK_EDITS", "true" if link_edits else "false")
        # The secrets agents' MCP servers read their headers from (`McpServer(headers_secret_arn=
        # ...)`). Only agent code names them, so the deployer lists them; each function that
        # lists or calls MCP tools may read them (a trigger's function too: `grant_mcp_headers`).
        self._mcp_header_secrets = tuple(mcp_header_secrets)
        for fn in (*self.all, *self.runners):
            self.grant_mcp_headers(fn)

        for fn in self.all:
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
                id=f"AwsSolutions-IAM5[Resource::<{logical_id(storage.bucket)}.Arn>/runs/*]",
                reason="Object keys are made per run and message; the grant stops at the runs/ prefix of one bucket.",
            )
            acknowledge(
                fn,
                id=f"AwsSolutions-IAM5[Resource::<{logical_id(storage.table)}.Arn>/index/*]",
                reason="CDK's table grant covers that one table's indexes (the runs-by-caller index).",
            )

    @property
    def all(self) -> tuple[lambda_.Function, ...]:
        return (self.orchestrator, self.tool_worker, self.api)

    @property
    def runners(self) -> tuple[lambda_.Function, ...]:
        """Every tool runner's function: the default one first."""
        return (self.tool_runner, *self.tool_runners.values())

    def _tool_runner(
        self, spec: specs.FunctionSpec, storage: Storage, worker_max_concurrency: int | None
    ) -> lambda_.Function:
        """One runner's function and role: the default runner's, or a named one's (`spec.runner`)."""
        runner = self._function(
            spec,
            [self.dependencies],
            # The pipeline's settings but the table's name (nothing here reads the table), where
            # spans go (the worker makes the call's span; tool code is not the pipeline) and the
            # plugins' switch (a tool may use a pydantic plugin, logfire's say).
            environment={
                k: v
                for k, v in self.environment.items()
                if k != "TABLE_NAME" and k not in specs.PLUGINS_OFF and not is_otel_setting(k)
            },
            env={specs.RUNNER_ENV: spec.runner} if spec.runner else None,
            own_logs_only=True,
        )
        runner.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject"], resources=[storage.bucket.arn_for_objects(f"{OVERFLOW_PREFIX}*")]
            )
        )
        runner.grant_invoke(self.tool_worker)
        acknowledge(
            runner,
            id=f"AwsSolutions-IAM5[Resource::<{logical_id(storage.bucket)}.Arn>/{OVERFLOW_PREFIX}*]",
            reason="A long answer goes under a key the worker makes per call; the runner may only put "
            "objects there, and the worker only read them.",
        )
        acknowledge(
            self.tool_worker,
            id=f"AwsSolutions-IAM5[Resource::<{logical_id(runner)}.Arn>:*]",
            reason="CDK's invoke grant covers the runner's versions and aliases, that one function only.",
        )
        acknowledge(
            runner,
            id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            reason="Not in the template: the runner's role has it deleted (`own_logs_only`, a deletion override "
            "cdk-nag does not read) and may write its own log group only.",
        )
        acknowledge(
            runner,
            id="AwsSolutions-IAM5[Resource::*]",
            reason="X-Ray tracing actions (PutTraceSegments, PutTelemetryRecords) support no resource-level scope.",
        )
        skip_checkov(
            runner,
            "CKV_AWS_115",
            "Invoked by the tool workers only, one call per worker invocation, so it runs at most as "
            + (
                f"many at once as the workers do: {worker_max_concurrency} (their event source's MaximumConcurrency)"
                if worker_max_concurrency is not None
                else "many at once as the workers do, and they scale with the queue (`worker_max_concurrency` "
                "sets no cap in this deployment)"
            )
            + "; a reservation would take as much from the account's pool.",
        )
        skip_checkov(
            runner,
            "CKV_AWS_116",
            "The worker invokes it synchronously: a failure is that call's error result, nothing to redrive.",
        )
        return runner

    def _function(
        self,
        spec: specs.FunctionSpec,
        layers: list[lambda_.ILayerVersion],
        env: dict[str, str] | None = None,
        *,
        environment: dict[str, str] | None = None,
        own_logs_only: bool = False,
        reserved: int | None = None,
    ) -> lambda_.Function:
        """One of the stack's functions with `env` added to the pipeline's shared environment
        (or to `environment`, in its place)."""
        log_group = logs.LogGroup(self, f"{spec.construct_id}Logs", retention=logs.RetentionDays.ONE_MONTH)
        skip_checkov(log_group, "CKV_AWS_158", TOOL_OUTPUT_LOGS if own_logs_only else LOGS_ENCRYPTION)
        function = lambda_.Function(
            self,
            spec.construct_id,
            runtime=bundling.RUNTIME,
            architecture=bundling.ARCHITECTURE,
            code=self.code,
            handler=spec.handler,
            layers=layers,
            timeout=Duration.seconds(spec.timeout_seconds),
            memory_size=spec.memory_mb,
            tracing=self.tracing,
            environment={**(self.environment if environment is None else environment), **(env or {})},
            log_group=log_group,
            reserved_concurrent_executions=reserved,
        )
        if own_logs_only:
            # Not AWSLambdaBasicExecutionRole, which may write any log group: tool code could
            # forge the pipeline's own logs. Its own log group's streams only.
            assert function.role is not None
            role = function.role.node.default_child
            assert isinstance(role, iam.CfnRole)
            role.add_property_deletion_override("ManagedPolicyArns")
            function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]
                )
            )
        skip_checkov(function, "CKV_AWS_117", NO_VPC)
        if reserved is None:
            skip_checkov(function, "CKV_AWS_115", NO_RESERVED_CONCURRENCY)
        skip_checkov(function, "CKV_AWS_173", ENVIRONMENT_HOLDS_NO_SECRET)
        return function

    def grant_mcp_headers(self, fn: lambda_.Function) -> None:
        """Let `fn`, which lists or calls agents' MCP tools, read their servers' header secrets."""
        if self._mcp_header_secrets:
            fn.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                    resources=list(self._mcp_header_secrets),
                )
            )

    def allow_runs(self, machine: sfn.IStateMachine) -> None:
        """What each function may do with the state machine that runs the agents, and its ARN."""
        # The worker answers its task, and starts a child run for an agent tool.
        machine.grant_task_response(self.tool_worker)
        machine.grant_start_execution(self.tool_worker)
        self.tool_worker.add_environment("STATE_MACHINE_ARN", machine.state_machine_arn)
        # A policy of its own, not the role's default one: the function depends on its default
        # policy and the state machine on the function, so a grant there would be a cycle.
        # It answers a parent run's task, and starts the fresh execution a long run continues in.
        role = self.orchestrator.role
        assert role is not None  # a Function built without a role gets one of its own
        policy = iam.Policy(
            self,
            "OrchestratorAnswersParentTasks",
            roles=[role],
            statements=[
                iam.PolicyStatement(
                    actions=["states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"],
                    resources=[machine.state_machine_arn],
                ),
                iam.PolicyStatement(actions=["states:StartExecution"], resources=[machine.state_machine_arn]),
                # An ended execution's history: its state transitions, counted into its run's cost.
                iam.PolicyStatement(
                    actions=["states:GetExecutionHistory"], resources=[executions_of(machine)]
                ),
            ],
        )
        acknowledge(
            policy,
            id=f"AwsSolutions-IAM5[Resource::{_nag_executions(machine)}]",
            reason="An ended execution's history is read to count its transitions; executions are named "
            "at run time, and the grant stops at one state machine's executions.",
        )
        machine.grant_start_execution(self.api)
        # A person's decision answers the call's WaitForApproval task (approve: success; deny:
        # failure). Scoped to this state machine's tasks.
        machine.grant(self.api, "states:SendTaskSuccess", "states:SendTaskFailure")
        # `POST /runs/{id}/cancel` stops the executions of a run and of its child runs.
        machine.grant_execution(self.api, "states:StopExecution")
        acknowledge(
            self.api,
            id=f"AwsSolutions-IAM5[Resource::{_nag_executions(machine)}]",
            reason="A cancel stops executions named at run time; the grant stops at one state machine's executions.",
        )
        self.api.add_environment("STATE_MACHINE_ARN", machine.state_machine_arn)


def executions_of(machine: sfn.IStateMachine) -> str:
    """The ARN pattern of every execution of `machine`, as CDK's `grant_execution` builds it."""
    stack = Stack.of(machine)
    name = stack.split_arn(machine.state_machine_arn, ArnFormat.COLON_RESOURCE_NAME).resource_name
    return stack.format_arn(
        service="states",
        resource="execution",
        resource_name=f"{name}:*",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


def _nag_executions(machine: sfn.IStateMachine) -> str:
    # The state machine's name, as CDK's execution grant derives it from the ARN (how cdk-nag prints it).
    return (
        "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:"
        f'execution:{{"Fn::Select":[6,{{"Fn::Split":[":",{{"Ref":"{logical_id(machine)}"}}]}}]}}:*'
    )
