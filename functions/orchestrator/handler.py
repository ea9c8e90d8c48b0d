"""One model step per invocation; returns a small decision with call ids, never contents."""

from typing import Any

from toolpipe.shared import collector

# What the cold start builds here lasts the function's life: the collector's passes would only
# walk it, so it is built with the collector paused, then, on Lambda, frozen (shared/collector.py).
with collector.cold_start():
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from botocore.exceptions import ClientError

    from toolpipe.shared.aws_clients import AwsClients
    from toolpipe.shared.costs import meter
    from toolpipe.shared.costs.invocation import metered
    from toolpipe.shared.costs.transitions import TransitionCounter
    from toolpipe.shared.history import DynamoHistoryStore
    from toolpipe.shared.history.errors import RunNotFoundError
    from toolpipe.shared.messages import (
        ORCHESTRATOR_REQUEST,
        ApprovalTaskRequest,
        DeadlineCheckRequest,
        ExecutionEndedRequest,
        FailRequest,
        OutOfTimeRequest,
    )
    from toolpipe.shared.runs.active_time import ActiveTime
    from toolpipe.shared.runs.deferred import DeferredCalls
    from toolpipe.shared.runs.executions import execution_number, run_id_of
    from toolpipe.shared.runs.factory import (
        build_active_time,
        build_deferred_calls,
        build_model_step,
        build_store,
        build_transition_counter,
    )
    from toolpipe.shared.runs.model_step import ModelStep, monotonic_deadline
    from toolpipe.shared.settings import (
        ApprovalLinkSettings,
        CallTimeouts,
        EventSettings,
        ModelSettings,
        RateSettings,
        StoreSettings,
    )
    from toolpipe.shared.tracing import trace_handler

    logger = Logger()
    # Errors that say the execution is not this state machine's to read (local IAM answers "403").
    _NOT_THIS_MACHINES = ("AccessDenied", "403", "ExecutionDoesNotExist", "InvalidArn")
    store_settings = StoreSettings.from_env()
    model_settings = ModelSettings.from_env()
    call_timeouts = CallTimeouts.from_env()
    event_settings = EventSettings.from_env()
    rate_settings = RateSettings.from_env()
    aws = AwsClients()  # one client per service for every service below


@collector.cold_built
def service() -> ModelStep:
    return build_model_step(
        store_settings, model_settings, call_timeouts, event_settings, rate_settings, aws=aws
    )


@collector.cold_built
def approvals() -> DeferredCalls:
    # Link settings read at the first approval, not at import: the local server sets the API's
    # URL once it listens, after the runtime's cold start.
    return build_deferred_calls(
        store_settings, event_settings, call_timeouts, links=ApprovalLinkSettings.from_env(), aws=aws
    )


@collector.cold_built
def active_time() -> ActiveTime:
    return build_active_time(store_settings, aws=aws)


@collector.cold_built
def transitions() -> TransitionCounter:
    return build_transition_counter(store_settings, aws=aws)


@collector.cold_built
def costs() -> DynamoHistoryStore:
    """Where the meter adds each run's counts at an invocation's end (shared/costs/invocation.py)."""
    return build_store(store_settings, aws=aws)


@logger.inject_lambda_context(clear_state=True)
@trace_handler
@metered("orchestrator", costs)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = ORCHESTRATOR_REQUEST.validate_python(event)
    if isinstance(request, ExecutionEndedRequest):
        return execution_ended(request)
    logger.append_keys(run_id=request.run_id)
    meter.attribute(request.run_id)
    if isinstance(request, ApprovalTaskRequest):
        approval = approvals().request(request)
        logger.info("call waits", seq=request.seq, approval_id=approval.approval_id, kind=request.kind)
        return {"approval_id": approval.approval_id}
    if isinstance(request, FailRequest):
        service().fail(request)
        logger.warning("run failed", error=request.error.get("Error"))
        return {"status": "failed"}
    if isinstance(request, OutOfTimeRequest):
        service().out_of_time(request)
        logger.warning("run passed its max_duration")
        return {"status": "limit"}
    if isinstance(request, DeadlineCheckRequest):
        check = active_time().check(request)
        logger.info("run's active time checked", passed=check.passed, next=check.next)
        return check.model_dump(mode="json")
    decision = service().step(request, monotonic_deadline(context.get_remaining_time_in_millis()))
    logger.info("model step", status=decision.status.value, turn=decision.turn, calls=len(decision.calls))
    # Without the fields an ungated turn leaves unset: the state stays as small as before.
    return decision.model_dump(mode="json", exclude_none=True)


def execution_ended(request: ExecutionEndedRequest) -> dict[str, Any]:
    """An execution ended: if it ended badly, fail its run, unless a state of the execution
    already ended it; then count its state transitions into its run (once).

    The same path as the state machine's own Catch, so a repeated event, or one for a run the
    model step already finished, changes nothing, and a child run answers its parent's call.
    """
    run_id = run_id_of(request.execution)
    logger.append_keys(run_id=run_id)
    meter.attribute(run_id)
    if request.status != "SUCCEEDED":
        try:
            service().fail(
                FailRequest(
                    action="fail",
                    run_id=run_id,
                    error={"Error": request.reason()},
                    execution=execution_number(request.execution),
                )
            )
        except RunNotFoundError:
            # An execution started by hand, not by a run: nothing to mark, and retrying won't help.
            logger.warning("ended execution has no run", execution=request.execution, status=request.status)
            return {"status": "ignored"}
        logger.warning("run's execution ended", status=request.status)
    if request.execution_arn:
        count_transitions(run_id, request.execution, request.execution_arn)
    return {"status": "counted" if request.status == "SUCCEEDED" else "failed"}


def count_transitions(run_id: str, execution: str, execution_arn: str) -> None:
    """Count the ended execution's transitions into its run. An execution this function may not
    read (not this state machine's) or that Step Functions does not know is no run's: said, and
    left uncounted. Anything else (throttling past the client's retries) is logged as an error
    and left uncounted too: the run's ending is recorded already, and the execution-ended
    dead-letter queue is for endings that were not, never for a cost figure."""
    try:
        counted = transitions().count(run_id, execution, execution_arn)
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code.startswith(_NOT_THIS_MACHINES):
            logger.warning("ended execution's transitions not counted", execution=execution, reason=code)
        else:
            logger.error("ended execution's transitions not counted", execution=execution, reason=code)
        return
    logger.info("execution's transitions", transitions=counted)
