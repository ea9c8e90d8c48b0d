"""Runs one tool call per SQS record and reports it to the waiting Step Functions task."""

from typing import Any

from toolpipe.shared import collector

# What the cold start builds here lasts the function's life: the collector's passes would only
# walk it, so it is built with the collector paused, then, on Lambda, frozen (shared/collector.py).
with collector.cold_start():
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from toolpipe.shared.aws_clients import AwsClients
    from toolpipe.shared.costs import meter
    from toolpipe.shared.costs.invocation import metered
    from toolpipe.shared.costs.requests import DELETED, delivered
    from toolpipe.shared.history import DynamoHistoryStore
    from toolpipe.shared.messages import ToolCallMessage
    from toolpipe.shared.runs.factory import build_store, build_tool_executor
    from toolpipe.shared.runs.tool_executor import ToolCallExecutor
    from toolpipe.shared.settings import (
        EventSettings,
        StateMachineSettings,
        StoreSettings,
        ToolRunnerSettings,
        WorkerSettings,
    )
    from toolpipe.shared.tracing import trace_handler

    logger = Logger()
    store_settings = StoreSettings.from_env()
    worker_settings = WorkerSettings.from_env()
    machine_settings = StateMachineSettings.from_env()
    event_settings = EventSettings.from_env()
    runner_settings = ToolRunnerSettings.from_env()
    aws = AwsClients()  # one client per service for the executor and the meter's counts
    # A claim outlives the invocation by this margin, so a redelivery takes it over only after
    # the invocation that holds it is certainly over.
    LEASE_MARGIN_SECONDS = 30


@collector.cold_built
def service() -> ToolCallExecutor:
    return build_tool_executor(
        store_settings, worker_settings, machine_settings, event_settings, runner_settings, aws=aws
    )


def record_handler(record: SQSRecord, lambda_context: LambdaContext) -> None:
    message = ToolCallMessage.model_validate_json(record.body)
    # Thread-safe keys: the local runtime runs invocations of this handler on several threads.
    logger.thread_safe_clear_keys()
    logger.thread_safe_append_keys(run_id=message.run_id, seq=message.seq)
    attempt = int(record.attributes.approximate_receive_count or 1)
    meter.attribute(message.run_id)
    meter.count(delivered(first_delivery=attempt == 1))
    outcome = service().execute(
        message,
        lease_seconds=lambda_context.get_remaining_time_in_millis() // 1000 + LEASE_MARGIN_SECONDS,
        attempt=attempt,
        time_left=lambda: lambda_context.get_remaining_time_in_millis() / 1000,
    )
    meter.count(DELETED)  # the record succeeded: Lambda's poller deletes its message
    if outcome is None:
        logger.info("tool call handed to a child run, or already over")
    else:
        logger.info("tool call done", status=outcome.status)


@collector.cold_built
def costs() -> DynamoHistoryStore:
    """Where the meter adds each run's counts at an invocation's end (shared/costs/invocation.py)."""
    return build_store(store_settings, aws=aws)


@logger.inject_lambda_context(clear_state=True)
@trace_handler
@metered("tool_worker", costs)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    # A processor per invocation: it holds the batch's results, and the local runtime runs
    # several invocations of this handler at once on threads.
    # With batch size 1 every failure is an entire-batch failure: report it as a partial one,
    # so Lambda returns the message to the queue instead of counting a crashed invocation.
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
