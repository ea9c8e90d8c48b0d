"""CloudWatch alarms on what needs an operator: messages left in a dead-letter queue, executions
that failed or timed out, and functions Lambda throttled. README "Alarms" has one line per alarm:
what it means and what to do."""

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from toolpipe.infra.cdk.constructs.nag import acknowledge, skip_checkov

# `alarm_topic_arn=create`: the stack makes the topic (subscribe to it after deploying).
CREATE_TOPIC = "create"
# One five-minute period: an alarm tells of what happened within it, and clears when a period passes
# without it.
PERIOD = Duration.minutes(5)


class Alarms(Construct):
    """One alarm per dead-letter queue (a message visible), two on the state machine (an execution
    failed, an execution timed out) and one per function (a throttled invocation). Each notifies
    `topic` when it goes into alarm and when it clears, if there is one."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        state_machine: sfn.IStateMachine,
        functions: Mapping[str, lambda_.IFunction],
        topic: str | sns.ITopic | None = None,
    ) -> None:
        """`dead_letter_queues`, `functions`: by the name the alarm's id is made from
        (`ToolDeadLetters` → `ToolDeadLettersAlarm`). `topic`: an SNS topic (or its ARN) every
        alarm notifies; `CREATE_TOPIC` makes one here; None notifies nobody (the alarms are still
        on the CloudWatch console)."""
        super().__init__(scope, construct_id)
        self.topic = self._topic(topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        for name, queue in dead_letter_queues.items():
            self._alarm(
                f"{name}Alarm",
                queue.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum"),
                f'toolpipe: a message waits in the {name} dead-letter queue (README "Alarms")',
            )
        self._alarm(
            "ExecutionsFailedAlarm",
            state_machine.metric_failed(period=PERIOD, statistic="Sum"),
            'toolpipe: a run\'s execution failed (README "Alarms")',
        )
        self._alarm(
            "ExecutionsTimedOutAlarm",
            state_machine.metric_timed_out(period=PERIOD, statistic="Sum"),
            'toolpipe: a run\'s execution timed out (README "Alarms")',
        )
        for name, function in functions.items():
            self._alarm(
                f"{name}ThrottlesAlarm",
                function.metric_throttles(period=PERIOD, statistic="Sum"),
                f'toolpipe: Lambda throttled the {name} function (README "Alarms")',
            )

    def _alarm(self, construct_id: str, metric: cloudwatch.Metric, description: str) -> None:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            # No data (no execution, no invocation in the period) is nothing wrong.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        if self.topic is not None:
            action = actions.SnsAction(self.topic)
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
        self.alarms[construct_id] = alarm

    def _topic(self, topic: str | sns.ITopic | None) -> sns.ITopic | None:
        if topic is None or not isinstance(topic, str):
            return topic
        if topic != CREATE_TOPIC:
            if not topic.startswith("arn:") or ":sns:" not in topic:
                raise ValueError(
                    f"alarm_topic_arn must be an SNS topic's ARN or {CREATE_TOPIC!r}, not {topic!r}"
                )
            return sns.Topic.from_topic_arn(self, "AlarmTopic", topic)
        created = sns.Topic(self, "AlarmTopic", display_name="toolpipe alarms", enforce_ssl=True)
        # CloudWatch publishes the alarms' notifications; nothing else may.
        created.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["sns:Publish"],
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                resources=[created.topic_arn],
            )
        )
        reason = (
            "The alarms' notifications carry alarm names and states, no run data; an AWS-managed key "
            "cannot be used by CloudWatch to publish, and a key of ours is a deployment's choice."
        )
        acknowledge(created, id="AwsSolutions-SNS2", reason=reason)
        skip_checkov(created, "CKV_AWS_26", reason)
        return created
