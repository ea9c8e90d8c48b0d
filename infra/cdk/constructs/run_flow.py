"""The Standard state machine that runs each agent, and the rule that ends runs it cannot."""

from typing import Any

from aws_cdk import Duration, Names
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from toolpipe.infra.cdk.constructs.nag import (
    LOGS_ENCRYPTION,
    SQS_MANAGED_SSE,
    acknowledge,
    logical_id,
    skip_checkov,
)
from toolpipe.infra.cdk.definition import (
    EXECUTION_ENDED_ACTION,
    EXECUTION_ENDED_PATHS,
    ORCHESTRATOR_ARN,
    TOOL_QUEUE_URL,
    definition_json,
    execution_ended_pattern,
)


class RunFlow(Construct):
    """The state machine from `infra.cdk.definition` (the very text the local runtime executes),
    its role, granted exactly what the definition calls, and the execution-status rule."""

    def __init__(
        self, scope: Construct, construct_id: str, *, orchestrator: lambda_.IFunction, tool_queue: sqs.IQueue
    ) -> None:
        super().__init__(scope, construct_id)
        flow_logs = logs.LogGroup(
            self,
            "RunFlowLogs",
            # Under /aws/vendedlogs/: Step Functions then needs no statement in the account's one
            # CloudWatch Logs resource policy (5,120 characters, shared by every log delivery),
            # which accounts with many state machines fill (https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html).
            log_group_name="/aws/vendedlogs/states/"
            + Names.unique_resource_name(self, max_length=200, separator="-"),
            retention=logs.RetentionDays.ONE_MONTH,
        )
        skip_checkov(flow_logs, "CKV_AWS_158", LOGS_ENCRYPTION)
        self.state_machine = sfn.StateMachine(
            self,
            "RunFlow",
            definition_body=sfn.DefinitionBody.from_string(definition_json()),
            definition_substitutions={
                ORCHESTRATOR_ARN: orchestrator.function_arn,
                TOOL_QUEUE_URL: tool_queue.queue_url,
            },
            state_machine_type=sfn.StateMachineType.STANDARD,
            tracing_enabled=True,
            # Execution data would put each SQS message, task token included, in the logs.
            logs=sfn.LogOptions(destination=flow_logs, level=sfn.LogLevel.ALL, include_execution_data=False),
        )
        self.role: iam.IRole = self.state_machine.role
        # A definition given as a string grants nothing by itself: give it exactly what it calls.
        orchestrator.grant_invoke(self.state_machine)
        tool_queue.grant_send_messages(self.state_machine)
        acknowledge(
            self.state_machine,
            id="AwsSolutions-IAM5[Resource::*]",
            reason="Step Functions log delivery and X-Ray actions support no resource-level scope.",
        )
        acknowledge(
            self.state_machine,
            id=f"AwsSolutions-IAM5[Resource::<{logical_id(orchestrator)}.Arn>:*]",
            reason="CDK's invoke grant covers the orchestrator's versions and aliases, that one function only.",
        )
        self.execution_ended_dead_letters = self._fail_runs_of_ended_executions(orchestrator)

    def _fail_runs_of_ended_executions(self, orchestrator: lambda_.IFunction) -> sqs.Queue:
        """An execution stopped by hand, or past its own timeout, ends where no state of it can
        mark its run: an EventBridge rule hands each such ending to the orchestrator, whose
        failure path (the one the state machine's Catch uses) is idempotent and answers a
        parent's call for a child run. The orchestrator, not a function of its own: it already
        has that path, the table and the right to answer parent tasks. Returns the rule's DLQ."""
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
            reason="This queue is itself a dead-letter queue: of the execution-ended rule's target, and "
            "of the orchestrator's asynchronous invocations.",
        )
        skip_checkov(dead_letters, "CKV_AWS_27", SQS_MANAGED_SSE)
        request = {"action": EXECUTION_ENDED_ACTION} | {
            name: events.EventField.from_path(path) for name, path in EXECUTION_ENDED_PATHS.items()
        }
        self.execution_ended_rule = events.Rule(
            self,
            "ExecutionEnded",
            description="Count an ended toolpipe execution's transitions; fail its run if it ended FAILED, TIMED_OUT or ABORTED",
            event_pattern=events.EventPattern(
                **_pattern_kwargs(execution_ended_pattern(self.state_machine.state_machine_arn))
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
        # The rule's DLQ holds events it could not hand over; once Lambda has taken one, a failed
        # run of the orchestrator is retried by Lambda, then kept in the same queue, not dropped.
        orchestrator.configure_async_invoke(
            retry_attempts=2,
            max_event_age=Duration.hours(6),
            on_failure=destinations.SqsDestination(dead_letters),
        )
        return dead_letters


def _pattern_kwargs(pattern: dict[str, Any]) -> dict[str, Any]:
    """An EventBridge pattern as `events.EventPattern` keyword arguments."""
    return {name.replace("-", "_"): value for name, value in pattern.items()}
