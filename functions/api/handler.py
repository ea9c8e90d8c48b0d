"""REST API: start a run, inspect a run. GET never changes state."""

from functools import cache
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import BadRequestError, NotFoundError
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from shared.errors import (
    RunNotFoundError,
    UnknownAgentError,
    UnknownToolsRequestedError,
    describe_validation_error,
)
from shared.history import DynamoHistoryStore
from shared.messages import HISTORY_ITEM, StartRunRequest
from shared.runs import RunStarter
from shared.runs.factory import build_run_starter, build_store
from shared.runs.report import tool_executions
from shared.settings import StateMachineSettings, StoreSettings

logger = Logger()
tracer = Tracer()
app = APIGatewayRestResolver()
store_settings = StoreSettings.from_env()
machine_settings = StateMachineSettings.from_env()


@cache
def starter() -> RunStarter:
    return build_run_starter(store_settings, machine_settings)


@cache
def store() -> DynamoHistoryStore:
    return build_store(store_settings)


@app.post("/runs")
def start_run() -> Response[dict[str, Any]]:
    try:
        request = StartRunRequest.model_validate_json(app.current_event.body or "")
    except ValidationError as e:
        raise BadRequestError(f"invalid run request: {describe_validation_error(e, 'body')}") from e
    try:
        record = starter().start(request)
    except (UnknownAgentError, UnknownToolsRequestedError) as e:
        raise BadRequestError(str(e)) from e
    logger.info("run started", run_id=record.run_id, agent=record.agent)
    return Response(
        status_code=HTTPStatus.ACCEPTED,
        content_type=content_types.APPLICATION_JSON,
        body={
            "run_id": record.run_id,
            "status": record.status.value,
            "links": {"self": f"/runs/{record.run_id}"},
        },
    )


@app.get("/runs/<run_id>")
def get_run(run_id: str) -> dict[str, Any]:
    try:
        record = store().get_run(run_id)
    except RunNotFoundError as e:
        raise NotFoundError(str(e)) from e
    history = store().load_history(run_id)
    return {
        "run": {**record.model_dump(mode="json"), "cost_usd": record.usage.cost_micro_usd / 1_000_000},
        "executions": [e.model_dump(mode="json") for e in tool_executions(run_id, history)],
        "messages": [HISTORY_ITEM.dump_python(i, mode="json") for i in history],
    }


@app.get("/runs/<run_id>/messages/<seq>")
def get_message(run_id: str, seq: str) -> dict[str, Any]:
    """One whole history item: where a long tool result in `executions` points."""
    item = store().get_item(run_id, int(seq)) if seq.isdigit() else None
    if item is None:
        raise NotFoundError(f"run {run_id} has no message {seq}")
    return dict(HISTORY_ITEM.dump_python(item, mode="json"))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
