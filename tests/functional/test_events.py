"""The sample events in events/ drive the real handlers, as `toolpipe invoke` does."""

import json
from pathlib import Path
from typing import Any

from infra.local.lambdas import LocalContext, call_handler
from tests.conftest import Pipeline

EVENTS = Path(__file__).resolve().parents[2] / "events"


def _event(name: str, run_id: str = "RUN_ID") -> Any:
    return json.loads((EVENTS / name).read_text().replace("RUN_ID", run_id))


def _ctx() -> LocalContext:
    return LocalContext(function_name="sample", timeout_seconds=60)


def test_sample_post_and_get_events_start_and_show_a_run(pipeline: Pipeline) -> None:
    started = call_handler("functions.api.handler.lambda_handler", _event("api_post_run.json"), _ctx())
    assert started["statusCode"] == 202
    run_id = json.loads(started["body"])["run_id"]
    pipeline.finish(run_id)

    shown = call_handler("functions.api.handler.lambda_handler", _event("api_get_run.json", run_id), _ctx())
    body = json.loads(shown["body"])
    assert body["run"]["status"] == "succeeded"
    assert body["run"]["timezone"] == "Europe/Paris"
    assert "689706.486532" in body["run"]["output"]


def test_sample_worker_event_whose_task_waits_no_more_is_consumed_without_running(pipeline: Pipeline) -> None:
    """The sample's task token names no waiting task: the call is over for Step Functions,
    so the message is consumed and nothing runs (the worker beats first, and learns it)."""
    response = call_handler(
        "functions.tool_worker.handler.lambda_handler", _event("tool_worker_sqs.json"), _ctx()
    )
    assert response == {"batchItemFailures": []}


def test_sample_orchestrator_event_for_an_unknown_run_fails_clearly(pipeline: Pipeline) -> None:
    try:
        call_handler(
            "functions.orchestrator.handler.lambda_handler", _event("orchestrator_step.json"), _ctx()
        )
    except Exception as e:
        assert str(e) == "run RUN_ID not found"
    else:
        raise AssertionError("a step for an unknown run must fail")
