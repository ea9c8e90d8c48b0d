"""Starts runs from S3 object notifications and EventBridge `RunRequested` events.

An event that can never start a run (malformed, an unknown agent, an event id reused with
another detail) is answered with one error line and dropped: raising would only have Lambda
retry it and then park it in the dead-letter queue. Anything else that fails (AWS unavailable)
raises, so Lambda's asynchronous retries, then the DLQ, take it.
"""

from dataclasses import asdict
from typing import Any

from toolpipe.shared import collector

# What the cold start builds here lasts the function's life: the collector's passes would only
# walk it, so it is built with the collector paused, then, on Lambda, frozen (shared/collector.py).
with collector.cold_start():
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from toolpipe.shared.agents.errors import UnknownAgentError
    from toolpipe.shared.aws_clients import AwsClients
    from toolpipe.shared.costs import meter
    from toolpipe.shared.costs.invocation import metered
    from toolpipe.shared.history import DynamoHistoryStore
    from toolpipe.shared.runs.errors import IdempotencyConflictError, UnknownToolsRequestedError
    from toolpipe.shared.runs.factory import build_store, build_trigger_service
    from toolpipe.shared.runs.triggers import TriggerResult, TriggerService
    from toolpipe.shared.settings import EventSettings, StateMachineSettings, StoreSettings, TriggerSettings
    from toolpipe.shared.tracing import trace_handler
    from toolpipe.shared.triggers import RunRequested, S3ObjectCreated, TriggerEventError, parse_trigger_event
    from toolpipe.shared.triggers.events import S3TestEvent

    logger = Logger()
    store_settings = StoreSettings.from_env()
    machine_settings = StateMachineSettings.from_env()
    trigger_settings = TriggerSettings.from_env()
    event_settings = EventSettings.from_env()  # RunStarted for the runs it starts
    aws = AwsClients()  # one client per service for the service and the meter's counts
    # Errors of the event itself: the same event fails the same way every time.
    _REJECTED = (TriggerEventError, UnknownAgentError, UnknownToolsRequestedError, IdempotencyConflictError)


@collector.cold_built
def service() -> TriggerService:
    return build_trigger_service(store_settings, machine_settings, event_settings, trigger_settings, aws=aws)


def _start(item: S3ObjectCreated | RunRequested) -> dict[str, Any]:
    meter.detach()  # what this event's start makes is its own run's, not the last event's
    try:
        if isinstance(item, RunRequested):
            result = service().run_requested(item)
        else:
            result = service().object_created(item)
    except _REJECTED as e:
        logger.error("trigger rejected", reason=str(e))
        return {"outcome": "rejected", "reason": str(e)}
    if result.run_id is not None:
        # What this event's start made (and the time it took) is its run's; the next event's is
        # the next run's.
        meter.attribute(result.run_id)
    if result.outcome == "skipped":
        logger.warning("trigger skipped", reason=result.reason)
    else:
        logger.info("run triggered", run_id=result.run_id, outcome=result.outcome)
    return _view(result)


def _view(result: TriggerResult) -> dict[str, Any]:
    return {k: v for k, v in asdict(result).items() if v is not None}


@collector.cold_built
def costs() -> DynamoHistoryStore:
    """Where the meter adds each run's counts at an invocation's end (shared/costs/invocation.py)."""
    return build_store(store_settings, aws=aws)


@logger.inject_lambda_context(clear_state=True)
@trace_handler
@metered("triggers", costs)
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    if isinstance(event, dict) and isinstance(event.get("id"), str):
        logger.append_keys(event_id=event["id"])
    try:
        parsed = parse_trigger_event(event, trigger_settings.sources)
    except TriggerEventError as e:
        logger.error("trigger rejected", reason=str(e))
        return {"outcome": "rejected", "reason": str(e)}
    if isinstance(parsed, S3TestEvent):
        logger.info("S3 test event: the notification is configured")
        return {"outcome": "ignored"}
    if isinstance(parsed, RunRequested):
        return _start(parsed)
    return {"results": [_start(item) for item in parsed]}
