"""The sample events in events/ drive the real handlers, as `toolpipe invoke` does."""

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Capture, Pipeline, call
from toolpipe.infra.cdk.functions import API, ORCHESTRATOR, TOOL_RUNNER, TOOL_WORKER
from toolpipe.infra.cli import main
from toolpipe.infra.local.lambdas import call_function
from toolpipe.infra.local.scripted_model import Reply

EVENTS = Path(__file__).resolve().parents[2] / "events"


def _event(name: str, run_id: str = "RUN_ID") -> Any:
    return json.loads((EVENTS / name).read_text().replace("RUN_ID", run_id))


def _api(event: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    # As the function, with its environment and role: the handler as Lambda runs it.
    response = call_function(API, event)
    body = response.get("body")
    # The REST resolver answers headers as multiValueHeaders, as API Gateway expects them.
    headers = {n: v[-1] for n, v in (response.get("multiValueHeaders") or {}).items() if n != "Content-Type"}
    return int(response["statusCode"]), headers, json.loads(body) if body else None


def _metas(pipeline: Pipeline) -> list[dict[str, Any]]:
    items = pipeline.runtime.dynamodb.scan(TableName="toolpipe-local")["Items"]
    return [i for i in items if i["sk"]["S"] == "META"]


def test_every_api_sample_drives_the_real_handler(pipeline: Pipeline) -> None:
    status, headers, started = _api(_event("api_post_run.json"))
    assert status == 202 and "Idempotent-Replayed" not in headers
    run_id = started["run_id"]
    # The status URL is absolute: API Gateway's domain name and stage.
    assert started["status_url"] == f"https://abc123.execute-api.us-east-1.amazonaws.com/v1/runs/{run_id}"
    # The same sample again (a client's retry, same Idempotency-Key): the same run, nothing new,
    # answered as it is now (its status may have moved on since the first answer).
    status, again_headers, again = _api(_event("api_post_run.json"))
    assert (status, again_headers) == (202, {**headers, "Idempotent-Replayed": "true"})
    assert {**again, "status": started["status"]} == started and again["status"] in ("running", "succeeded")
    assert len(_metas(pipeline)) == 1
    pipeline.finish(run_id)

    status, _, shown = _api(_event("api_get_run.json", run_id))
    assert status == 200 and shown["run"]["status"] == "succeeded"
    assert shown["run"]["timezone"] == "Europe/Paris" and shown["run"]["metadata"] == {"ticket": "T-42"}
    assert "689706.486532" in shown["run"]["output"]
    status, _, messages = _api(_event("api_get_messages.json", run_id))
    assert status == 200 and messages["messages"][0]["content"].startswith("What is the square root")
    status, _, listed = _api(_event("api_list_runs.json"))
    assert status == 200 and [r["run_id"] for r in listed["runs"]] == [run_id]
    # Cancelling an ended run is a conflict; a running one is cancelled, twice the same.
    status, _, conflict = _api(_event("api_cancel_run.json", run_id))
    assert status == 409 and "already ended" in conflict["message"]
    pipeline.script(Reply(tool_calls=[call("slow", seconds=1.5)]), Reply(content="never asked"))
    running = pipeline.start("wait")
    status, _, cancelled = _api(_event("api_cancel_run.json", running))
    assert (status, cancelled["status"]) == (200, "cancelled")
    assert _api(_event("api_cancel_run.json", running))[::2] == (200, cancelled)
    pipeline.runtime.wait_for_execution(running)  # stopped, or ended at its next step: either way
    assert _api(_event("api_get_run.json", running))[2]["run"]["status"] == "cancelled"
    # Deleting an ended run: nothing of it is left, and a second delete finds nothing.
    assert _api(_event("api_delete_run.json", run_id))[::2] == (204, None)
    assert _api(_event("api_get_run.json", run_id))[0] == 404
    assert _api(_event("api_delete_run.json", run_id))[0] == 404


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(event: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = event
        for name in parents:
            target = target[name]
        target[last] = value

    return change


def _body(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return _set("body", json.dumps(fields))


@pytest.mark.parametrize(
    ("sample", "change", "status", "message"),
    [
        ("api_post_run.json", _set("body", "{"), 400, "body: Invalid JSON"),
        ("api_post_run.json", _body(input=" "), 400, "input: the input is blank"),
        ("api_post_run.json", _body(input="hi", metadata={"k": "v" * 300}), 400, "metadata.k:"),
        ("api_post_run.json", _set("headers.Idempotency-Key", "has spaces"), 400, "header.Idempotency-Key"),
        ("api_post_run.json", _set("requestContext.identity", {}), 403, "no caller identity"),
        ("api_list_runs.json", _set("queryStringParameters.status", "done"), 400, "query.status"),
        ("api_list_runs.json", _set("queryStringParameters.next", "forged"), 400, "query.next"),
        ("api_list_runs.json", _set("queryStringParameters.limit", "0"), 400, "query.limit"),
        ("api_get_messages.json", _set("queryStringParameters.limit", "1000"), 400, "query.limit"),
        ("api_get_messages.json", _set("queryStringParameters.after", "x"), 400, "query.after"),
        ("api_get_run.json", lambda e: None, 404, "run RUN_ID not found"),
        ("api_get_messages.json", lambda e: None, 404, "run RUN_ID not found"),
        ("api_cancel_run.json", lambda e: None, 404, "run RUN_ID not found"),
        ("api_cancel_run.json", _set("path", "/runs/bad.id/cancel"), 400, "path.run_id"),
        ("api_delete_run.json", lambda e: None, 404, "run RUN_ID not found"),
        ("api_delete_run.json", _set("path", "/runs/bad.id"), 400, "path.run_id"),
    ],
)
def test_malformed_api_samples_are_a_clear_4xx_and_write_nothing(
    pipeline: Pipeline, sample: str, change: Callable[[dict[str, Any]], None], status: int, message: str
) -> None:
    event = copy.deepcopy(_event(sample))
    change(event)
    answered, _, body = _api(event)
    assert answered == status and message in body["message"], body
    assert pipeline.runtime.dynamodb.scan(TableName="toolpipe-local")["Items"] == []


def test_toolpipe_invoke_runs_every_api_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))

    def invoke(sample: str, *ids: str, code: int = 0) -> tuple[int, Any, str]:
        out, err = Capture(), Capture()
        assert main(["invoke", "api", str(EVENTS / sample), *ids], out, err) == code, out.text + err.text
        response = json.loads(out.text)  # stdout is the result alone, an error answer too
        return int(response["statusCode"]), json.loads(response["body"]), err.text.splitlines()[-1]

    status, started, _ = invoke("api_post_run.json")
    assert status == 202
    run_id = started["run_id"]
    # One run for the key, across processes (the replay tells how the run stands now).
    status, again, _ = invoke("api_post_run.json")
    assert (status, again["run_id"]) == (202, run_id)
    status, shown, _ = invoke("api_get_run.json", "--run-id", run_id)
    assert status == 200 and shown["run"]["status"] == "succeeded"
    assert invoke("api_get_messages.json", "--run-id", run_id)[0] == 200
    assert [r["run_id"] for r in invoke("api_list_runs.json")[1]["runs"]] == [run_id]
    # The handler's 4xx is the command's failure: printed, then exit 1 with one line naming it.
    status, body, error = invoke("api_cancel_run.json", "--run-id", run_id, code=1)
    assert status == 409
    assert error == f"toolpipe: error: api answered 409: {body['message']}"
    # `--approval-id` fills the approval routes' path as `--run-id` fills the runs'.
    missing = "0123456789abcdef0123456789abcdef"
    status, body, error = invoke("api_approve.json", "--approval-id", missing, code=1)
    assert status == 404 and missing in body["message"]
    assert error == f"toolpipe: error: api answered 404: {body['message']}"
    status, body, _ = invoke("api_approve.json", code=1)  # left out: the placeholder is no id
    assert status == 400 and "approval_id" in body["message"]


def test_sample_worker_event_whose_task_waits_no_more_is_consumed_without_running(pipeline: Pipeline) -> None:
    """The sample's task token names no waiting task: the call is over for Step Functions,
    so the message is consumed and nothing runs (the worker beats first, and learns it)."""
    response = call_function(TOOL_WORKER, _event("tool_worker_sqs.json"))
    assert response == {"batchItemFailures": []}


def test_sample_tool_runner_event_runs_the_tool_and_answers_what_the_worker_stores(
    pipeline: Pipeline,
) -> None:
    response = call_function(TOOL_RUNNER, _event("tool_runner_call.json"))
    assert {k: response[k] for k in ("content", "status", "error_type", "overflowed")} == {
        "content": "5.0",
        "status": "ok",
        "error_type": None,
        "overflowed": False,
    }


def test_sample_orchestrator_event_for_an_unknown_run_fails_clearly(pipeline: Pipeline) -> None:
    try:
        call_function(ORCHESTRATOR, _event("orchestrator_step.json"))
    except Exception as e:
        assert str(e) == "run RUN_ID not found"
    else:
        raise AssertionError("a step for an unknown run must fail")


def test_the_execution_status_change_sample_fails_the_run_once(pipeline: Pipeline) -> None:
    """The rule's event, delivered twice as EventBridge may: the run is failed with the reason,
    and the second delivery changes nothing."""
    from tests.conftest import GATE, GATE_REACHED, wait_for_gate
    from toolpipe.infra.cdk.definition import execution_ended_request

    GATE.clear()
    GATE_REACHED.clear()
    try:
        from toolpipe.shared.agents import AGENTS, Agent

        AGENTS["gated"] = Agent(name="gated", instructions="Wait.", tools=[wait_for_gate])
        pipeline.script(Reply(tool_calls=[call("wait_for_gate", label="a")]), Reply(content="never"))
        run_id = pipeline.start("wait", agent="gated")
        # The call runs once the model step that asked for it is over (its turn counted): the
        # execution's end is reported after that, or the step's own write lands between the
        # two reads below.
        assert GATE_REACHED.wait(10), "the call never started"
        sample = _event("execution_status_change.json", run_id)
        key = {"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "META"}}
        first = call_function(ORCHESTRATOR, execution_ended_request(sample))
        record = pipeline.runtime.dynamodb.get_item(TableName="toolpipe-local", Key=key)["Item"]
        again = call_function(ORCHESTRATOR, execution_ended_request(sample))
        after = pipeline.runtime.dynamodb.get_item(TableName="toolpipe-local", Key=key)["Item"]
        GATE.set()
        # The execution goes on to its end (its run already failed): the agent stays registered
        # until it has, or its next step finds no such agent and is retried until the drain.
        pipeline.runtime.wait_for_execution(run_id, timeout=10)
    finally:
        GATE.set()
        AGENTS.pop("gated", None)
    assert first == again == {"status": "failed"}
    assert record["status"]["S"] == "failed" and "execution aborted" in record["error"]["S"]
    assert after == record  # the repeat wrote nothing
