"""The tool-call queue the state machine dispatches to, and its dead-letter queue."""

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from toolpipe.infra.cdk import limits
from toolpipe.infra.cdk.constructs.nag import SQS_MANAGED_SSE, skip_checkov


class ToolQueue(Construct):
    """One message per tool call, consumed by the tool worker one at a time. The visibility
    timeout and the receive count hang together with the worker's and the call's timeouts
    (`infra/cdk/limits.py`, held by `tests/infra/test_timings.py`)."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.dead_letters = sqs.Queue(
            self,
            "ToolDeadLetters",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.queue = sqs.Queue(
            self,
            "ToolCalls",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(limits.QUEUE_VISIBILITY_SECONDS),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letters, max_receive_count=limits.MAX_RECEIVES
            ),
        )
        for queue in (self.queue, self.dead_letters):
            skip_checkov(queue, "CKV_AWS_27", SQS_MANAGED_SSE)
