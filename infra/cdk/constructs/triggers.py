"""The triggers: files dropped in S3 and `RunRequested` events (schedules included) start runs.

- **Input bucket**: a bucket of its own, versioned. Its own, so the principals allowed to drop
  files get nothing on the contents bucket (every run's large messages), and its lifecycle is
  the deployer's; versioned, so a run reads exactly the version that started it, even if the
  key is overwritten mid-run, and is keyed by that version.
- **S3 -> Lambda**, not S3 -> EventBridge: the notification's prefix filter means only files
  under the input prefix invoke anything (with EventBridge, every event of the bucket would go
  to the default bus to be filtered there), and the local runtime gets the same path from
  moto. Asynchronous invocation: Lambda retries a failed invocation twice, then the event goes
  to the dead-letter queue; an event that can never start a run is dropped with an error line.
- **RunRequested rule** on the stack's bus, targeting the same function, with a retry policy
  and the same dead-letter queue for events that could not be delivered.
- **Schedules** (EventBridge Scheduler) put RunRequested events on that bus; their role may do
  nothing but `events:PutEvents` on it.

Who may read where: the triggers function reads (heads) the input prefix and lists the bucket
(S3 tells only a role that may list it that an input is gone); the tool worker reads it, only
to presign a run's own object for `read_input`, whose code runs in the tool runner (which may
read no input); the orchestrator reads and writes the output prefix (a run's answer, written
once with conditional puts when the run ends, on the path that already answers parent runs) and
may not list the bucket.
"""

import json
import re
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3n
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct, IConstruct, Node

from toolpipe.infra.cdk import bundling
from toolpipe.infra.cdk.constructs.nag import (
    ENVIRONMENT_HOLDS_NO_SECRET,
    LOGS_ENCRYPTION,
    NO_RESERVED_CONCURRENCY,
    NO_VPC,
    SQS_MANAGED_SSE,
    logical_id,
    skip_checkov,
)
from toolpipe.infra.cdk.constructs.storage import grant_run_objects
from toolpipe.infra.cdk.functions import TRIGGERS
from toolpipe.shared.history.retention import DEFAULT_RETENTION_DAYS
from toolpipe.shared.settings import TriggerSettings
from toolpipe.shared.triggers.events import RUN_REQUESTED_DETAIL_TYPE, RunRequestedDetail

SCHEDULE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,48}$")


@dataclass(frozen=True)
class TriggerSchedule:
    """One schedule: `expression` is Scheduler's (`rate(1 day)`, `cron(0 7 * * ? *)`, `at(...)`)."""

    name: str
    expression: str
    detail: RunRequestedDetail
    time_zone: str | None = None  # IANA; Scheduler's default is UTC

    @classmethod
    def parse(cls, entry: dict[str, Any]) -> "TriggerSchedule":
        """From CDK context: `{name, expression, agent, input, tools?, timezone?, metadata?}`.
        Checked at synth: a bad schedule fails `cdk synth`, not its first run a day later."""
        entry = dict(entry)
        name, expression = str(entry.pop("name", "")), str(entry.pop("expression", ""))
        if not SCHEDULE_NAME.match(name):
            raise ValueError(f"trigger schedule name {name!r}: 1-48 letters, digits, '_' or '-'")
        if not re.match(r"^(rate|cron|at)\(.+\)$", expression):
            raise ValueError(
                f"trigger schedule {name!r}: expression {expression!r} is not rate(...), cron(...) or at(...)"
            )
        detail = RunRequestedDetail.model_validate(entry)
        detail.start_request()  # the checks POST /runs makes
        return cls(name, expression, detail, entry.get("timezone"))


@dataclass(frozen=True)
class TriggerOptions:
    """What the deployer chooses (CDK context `trigger_*`, see `from_context`)."""

    settings: TriggerSettings = field(default_factory=TriggerSettings)
    schedules: list[TriggerSchedule] = field(default_factory=list)

    @classmethod
    def from_context(cls, node: Node) -> "TriggerOptions":
        def context(name: str) -> Any:
            return node.try_get_context(f"trigger_{name}")

        env = {
            # A list (cdk.json's `"trigger_sources": [...]`) as the environment holds it.
            var: ",".join(map(str, value)) if isinstance(value, list) else str(value)
            for name, var in TriggerSettings.env_names.items()
            if name != "bucket" and (value := context(name)) not in (None, "")
        }
        schedules = context("schedules") or []
        if isinstance(schedules, str):  # `-c trigger_schedules='[...]'` arrives as text
            schedules = json.loads(schedules)
        return cls(TriggerSettings.from_env(env), [TriggerSchedule.parse(s) for s in schedules])


def _acknowledge(construct: IConstruct, id: str, reason: str) -> None:
    Validations.of(construct).acknowledge(Acknowledgment(id=id, reason=reason))


class Triggers(Construct):
    """The input bucket and its notification, the triggers function, the RunRequested rule and
    the schedules. The stack passes what runs need (table, state machine, code) and the bus."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bus: events.IEventBus,
        table: dynamodb.ITable,
        contents: s3.IBucket,
        machine: sfn.IStateMachine,
        orchestrator: lambda_.IFunction,
        worker: lambda_.IFunction,
        code: lambda_.Code,
        layers: list[lambda_.ILayerVersion],
        environment: dict[str, str],
        options: TriggerOptions,
        tracing: lambda_.Tracing = lambda_.Tracing.ACTIVE,
        retention_days: int = DEFAULT_RETENTION_DAYS,
    ) -> None:
        super().__init__(scope, construct_id)
        settings = options.settings
        self._input_prefix, self._output_prefix = settings.input_prefix, settings.output_prefix
        self.bucket = s3.Bucket(
            self,
            "Inputs",
            versioned=True,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        # An input overwritten or deleted keeps its old version (a run reads the version that
        # started it) for as long as an ended run is kept, then it goes. Current versions, and
        # the answers, are yours to keep or expire.
        self.bucket.add_lifecycle_rule(
            id="OldInputVersionsExpire", noncurrent_version_expiration=Duration.days(retention_days)
        )
        _acknowledge(
            self.bucket,
            "AwsSolutions-S1",
            "Writers are the deployer's own principals; CloudTrail data events are the audit path.",
        )
        skip_checkov(
            self.bucket,
            "CKV_AWS_18",
            "Writers are the deployer's own principals; CloudTrail data events are the audit path.",
        )
        self.dead_letters = sqs.Queue(
            self,
            "DeadLetters",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        _acknowledge(
            self.dead_letters,
            "AwsSolutions-SQS3",
            "This queue is itself the dead-letter queue of the triggers function and its rule.",
        )
        skip_checkov(self.dead_letters, "CKV_AWS_27", SQS_MANAGED_SSE)
        log_group = logs.LogGroup(self, "Logs", retention=logs.RetentionDays.ONE_MONTH)
        skip_checkov(log_group, "CKV_AWS_158", LOGS_ENCRYPTION)
        self.function = lambda_.Function(
            self,
            TRIGGERS.construct_id,
            runtime=bundling.RUNTIME,
            architecture=bundling.ARCHITECTURE,
            code=code,
            handler=TRIGGERS.handler,
            layers=layers,
            timeout=Duration.seconds(TRIGGERS.timeout_seconds),
            memory_size=TRIGGERS.memory_mb,
            tracing=tracing,
            environment={
                **environment,
                "STATE_MACHINE_ARN": machine.state_machine_arn,
                "TOOLPIPE_TRIGGER_BUCKET": self.bucket.bucket_name,
                # Unset: the app's first agent.
                **({"TOOLPIPE_TRIGGER_AGENT": settings.agent} if settings.agent else {}),
                "TOOLPIPE_TRIGGER_INPUT_PREFIX": settings.input_prefix,
                "TOOLPIPE_TRIGGER_OUTPUT_PREFIX": settings.output_prefix,
                "TOOLPIPE_TRIGGER_MAX_OBJECT_BYTES": str(settings.max_object_bytes),
                "TOOLPIPE_TRIGGER_INSTRUCTIONS": settings.instructions,
                **({"TOOLPIPE_TRIGGER_PRINCIPAL": settings.principal} if settings.principal else {}),
                "TOOLPIPE_TRIGGER_SOURCES": ",".join(settings.sources),
            },
            log_group=log_group,
            # S3 and EventBridge invoke it asynchronously: two retries, then the DLQ.
            retry_attempts=2,
            max_event_age=Duration.hours(6),
            on_failure=destinations.SqsDestination(self.dead_letters),
        )
        fn = self.function
        skip_checkov(
            fn,
            "CKV_AWS_116",
            "False positive: its asynchronous failures go to an on-failure destination (the DLQ above), "
            "which the check does not recognise.",
        )
        skip_checkov(fn, "CKV_AWS_117", NO_VPC)
        skip_checkov(fn, "CKV_AWS_115", NO_RESERVED_CONCURRENCY)
        skip_checkov(fn, "CKV_AWS_173", ENVIRONMENT_HOLDS_NO_SECRET)
        inputs = self.bucket.arn_for_objects(f"{settings.input_prefix}*")
        outputs = self.bucket.arn_for_objects(f"{settings.output_prefix}*")
        # HeadObject needs s3:GetObject (GetObjectVersion for a version).
        read = ["s3:GetObject", "s3:GetObjectVersion"]
        fn.add_to_role_policy(iam.PolicyStatement(actions=read, resources=[inputs]))
        # Its head of an input deleted since its notification: S3 answers 404 only to a role
        # that may list the bucket, 403 (not to be told from a refusal) to any other.
        fn.add_to_role_policy(
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.bucket.bucket_arn])
        )
        # What the worker's presigned links for `read_input` read: S3 authorizes a link as its signer.
        worker.add_to_role_policy(iam.PolicyStatement(actions=read, resources=[inputs]))
        # The answer: a conditional put, and a head only of an answer that exists (no ListBucket).
        orchestrator.add_to_role_policy(
            iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"], resources=[outputs])
        )
        # Starting a run: its record and first message (a long one in the contents bucket), and
        # ending it (tagged for expiry) when its execution cannot start.
        table.grant_read_write_data(fn)
        grant_run_objects(fn, contents)
        machine.grant_start_execution(fn)

        self.bucket.add_event_notification(
            s3.EventType.OBJECT_CREATED,
            s3n.LambdaDestination(fn),
            s3.NotificationKeyFilter(prefix=settings.input_prefix),
        )
        # CDK configures bucket notifications through a singleton custom-resource function.
        for child in Stack.of(self).node.children:
            if child.node.id.startswith("BucketNotificationsHandler"):
                _acknowledge(
                    child,
                    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
                    "CDK's bucket-notifications handler: AWSLambdaBasicExecutionRole only writes its own logs.",
                )
                handler = child.node.find_child("Resource")
                skip_checkov(
                    handler,
                    "CKV_AWS_116",
                    "CDK's bucket-notifications handler, run by CloudFormation during a deploy: a failure "
                    "fails the deployment, where it must be seen; a DLQ would hold nothing to act on.",
                )
                skip_checkov(
                    handler,
                    "CKV_AWS_117",
                    "CDK's handler calls the S3 API only and reaches no private resource.",
                )
                skip_checkov(
                    handler,
                    "CKV_AWS_115",
                    "Runs once per deploy that changes the bucket's notifications. "
                    + NO_RESERVED_CONCURRENCY,
                )
        self.rule = events.Rule(
            self,
            "RunRequested",
            description="Start a toolpipe run for each RunRequested event",
            event_bus=bus,
            # The sources the deployer named (`trigger_sources`); by default not the run events'
            # own, so a subscriber to `toolpipe` receives no request's input. No function may
            # put RunRequested, whatever its source (infra/cdk/constructs/events.py).
            event_pattern=events.EventPattern(
                source=list(settings.sources), detail_type=[RUN_REQUESTED_DETAIL_TYPE]
            ),
            targets=[
                targets.LambdaFunction(
                    fn,
                    dead_letter_queue=self.dead_letters,
                    # Delivery failures (throttling, an outage): retried for up to a day.
                    retry_attempts=185,
                    max_event_age=Duration.hours(24),
                )
            ],
        )
        self._schedules(bus, options.schedules, settings.sources[0])
        self._acknowledge_function(contents, table, orchestrator, worker)

    def _schedules(self, bus: events.IEventBus, schedules: list[TriggerSchedule], source: str) -> None:
        if not schedules:
            return
        stack = Stack.of(self)
        # One role for every schedule: it may put events on this bus, nothing else, and only
        # Scheduler acting for this account may assume it (confused-deputy guard).
        role = iam.Role(
            self,
            "SchedulerRole",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": stack.account}}
            ),
        )
        for entry in schedules:
            scheduler.Schedule(
                self,
                f"Schedule-{entry.name}",
                description=f"toolpipe schedule {entry.name}: a RunRequested event for agent {entry.detail.agent}",
                schedule=scheduler.ScheduleExpression.expression(
                    entry.expression,
                    time_zone=None if entry.time_zone is None else _time_zone(entry.time_zone),
                ),
                target=scheduler_targets.EventBridgePutEvents(
                    scheduler_targets.EventBridgePutEventsEntry(
                        event_bus=bus,
                        source=source,
                        detail_type=RUN_REQUESTED_DETAIL_TYPE,
                        detail=scheduler.ScheduleTargetInput.from_object(
                            entry.detail.model_dump(mode="json", exclude_none=True)
                        ),
                    ),
                    role=role,
                    retry_attempts=185,
                    max_event_age=Duration.hours(24),
                ),
            )

    def _acknowledge_function(
        self,
        contents: s3.IBucket,
        table: dynamodb.ITable,
        orchestrator: lambda_.IFunction,
        worker: lambda_.IFunction,
    ) -> None:
        stack = Stack.of(self)
        bucket = stack.get_logical_id(self.bucket.node.default_child)  # type: ignore[arg-type]
        _acknowledge(
            self.function,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "AWSLambdaBasicExecutionRole only lets the function write its own logs.",
        )
        _acknowledge(
            self.function,
            "AwsSolutions-IAM5[Resource::*]",
            "X-Ray tracing actions (PutTraceSegments, PutTelemetryRecords) support no resource-level scope.",
        )
        for construct in (self.function, worker):
            _acknowledge(
                construct,
                f"AwsSolutions-IAM5[Resource::<{bucket}.Arn>/{self._input_prefix}*]",
                "Files arrive under any name below the input prefix; the grant stops at that prefix.",
            )
        _acknowledge(
            orchestrator,
            f"AwsSolutions-IAM5[Resource::<{bucket}.Arn>/{self._output_prefix}*]",
            "An answer is named after its file; the grant stops at the output prefix.",
        )
        _acknowledge(
            self.function,
            f"AwsSolutions-IAM5[Resource::<{logical_id(table)}.Arn>/index/*]",
            "CDK's table grant covers that one table's indexes (the runs-by-caller index).",
        )
        _acknowledge(
            self.function,
            f"AwsSolutions-IAM5[Resource::<{stack.get_logical_id(contents.node.default_child)}.Arn>/runs/*]",  # type: ignore[arg-type]
            "Object keys are made per run and message; the grant stops at the runs/ prefix of one bucket.",
        )


def _time_zone(name: str) -> Any:
    from aws_cdk import TimeZone

    return TimeZone.of(name)
