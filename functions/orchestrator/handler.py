"""One model step per invocation; returns a small decision with call ids, never contents."""

from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from shared.messages import ORCHESTRATOR_REQUEST, FailRequest
from shared.runs import ModelStep, monotonic_deadline
from shared.runs.factory import build_model_step
from shared.settings import CallTimeouts, ModelSettings, StoreSettings

logger = Logger()
tracer = Tracer()
store_settings = StoreSettings.from_env()
model_settings = ModelSettings.from_env()
call_timeouts = CallTimeouts.from_env()


@cache
def service() -> ModelStep:
    return build_model_step(store_settings, model_settings, call_timeouts)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = ORCHESTRATOR_REQUEST.validate_python(event)
    logger.append_keys(run_id=request.run_id)
    if isinstance(request, FailRequest):
        service().fail(request)
        logger.warning("run failed", error=request.error.get("Error"))
        return {"status": "failed"}
    decision = service().step(request, monotonic_deadline(context.get_remaining_time_in_millis()))
    logger.info("model step", status=decision.status.value, turn=decision.turn, calls=len(decision.calls))
    return decision.model_dump(mode="json")
