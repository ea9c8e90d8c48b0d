"""The whole pipeline on the local runtime, as a user runs it."""

import json
from typing import Any

from tests.conftest import CALLS, Capture, Pipeline, call
from toolpipe.infra.cli import main
from toolpipe.infra.local.scripted_model import Reply


def test_cli_demo_answers_square_root_offline(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path / "state"))
    out, err = Capture(), Capture()

    code = main(["run", "What is the square root of 475695037565?"], out, err)

    text = out.text
    assert code == 0, text + err.text
    # Banners: stderr, the state folder in use first.
    assert err.text.startswith(
        f"toolpipe: state folder {tmp_path / 'state'}\nmodel endpoint: scripted demo model"
    )
    assert 'call square_root({"x": 475695037565.0})' in text
    assert "689706.486532" in text.split("answer:")[1]

    run_id = text.split("run ")[1].split()[0]
    shown = Capture()
    assert main(["show", run_id, "--json"], shown) == 0
    trace_id = json.loads(shown.text)["run"]["trace"]["trace_id"]
    as_text = Capture()
    assert main(["show", run_id], as_text) == 0
    assert f"trace: {trace_id}\n" in as_text.text  # to find the run in a tracing backend
    messages = json.loads(shown.text)["messages"]
    assert [m["kind"] for m in messages] == ["user", "assistant", "tool_result", "assistant"]
    assert messages[1]["tool_calls"][0]["name"] == "square_root"
    assert messages[2]["content"].startswith("689706.486532")
    assert "689706.486532" in messages[3]["content"]


def test_history_holds_one_item_per_message(pipeline: Pipeline) -> None:
    run_id = pipeline.start("What is the square root of 475695037565?", agent="assistant")
    pipeline.finish(run_id)

    items = pipeline.runtime.dynamodb.query(
        TableName="toolpipe-local",
        KeyConditionExpression="pk = :pk AND begins_with(sk, :m)",
        ExpressionAttributeValues={":pk": {"S": f"RUN#{run_id}"}, ":m": {"S": "MSG#"}},
    )["Items"]
    assert [(i["sk"]["S"], i["kind"]["S"]) for i in items] == [
        ("MSG#000001", "user"),
        ("MSG#000002", "assistant"),
        ("MSG#000003", "tool_result"),
        ("MSG#000004", "assistant"),
    ]


def test_two_calls_in_one_reply_run_in_their_own_invocations(pipeline: Pipeline) -> None:
    pipeline.script(
        Reply(tool_calls=[call("count_once", label="a"), call("count_once", label="b")]),
        Reply(content="both done"),
    )
    run_id = pipeline.start("count twice")
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert CALLS.counts == {"count_once": 2}
    assert pipeline.runtime.workers is not None and pipeline.runtime.workers.invocations == 2
    second_request = pipeline.model.requests[1]["messages"]
    tool_messages = [m for m in second_request if m["role"] == "tool"]
    assert {m["tool_call_id"]: m["content"] for m in tool_messages} == {
        "call_1_0": "counted a",
        "call_1_1": "counted b",
    }


def test_large_tool_output_never_enters_step_functions(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("big_output", kilobytes=100)]), Reply(content="got it"))
    run_id = pipeline.start("make it big")
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    # The model read a preview and a reference; the whole output is in S3.
    tool_message = next(m for m in pipeline.model.requests[1]["messages"] if m["role"] == "tool")
    ref = f"runs/{run_id}/results/000003.txt"
    assert tool_message["content"] == "x" * 20_000 + (
        f"\n[… result truncated: 100000 characters in all, the first 20000 shown. Whole result stored as {ref}.]"
    )
    stored = pipeline.runtime.s3.get_object(Bucket="toolpipe-local-contents", Key=ref)["Body"].read()
    assert stored == b"x" * 100_000
    assert body["executions"][0]["full_result_ref"] == ref
    sizes = _payload_sizes(pipeline.runtime.execution_events(run_id))
    assert sizes, "no inputs or outputs found in the execution history"
    assert max(sizes) < 2048, max(sizes)


def test_tool_exception_reaches_the_model_and_the_run_goes_on(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("explode", reason="disk full")]), Reply(content="sorry"))
    body = pipeline.finish(pipeline.start("break it"))

    assert body["run"]["status"] == "succeeded"
    tool_message = next(m for m in pipeline.model.requests[1]["messages"] if m["role"] == "tool")
    assert tool_message["content"] == "Error: Tool 'explode' failed: RuntimeError: disk full"


def test_unknown_tool_and_bad_arguments_are_answered_without_dispatch(pipeline: Pipeline) -> None:
    pipeline.script(
        Reply(tool_calls=[call("launch_rockets", count=3), call("big_output", kilobytes="many")]),
        Reply(content="understood"),
    )
    body = pipeline.finish(pipeline.start("do impossible things"))

    assert body["run"]["status"] == "succeeded"
    assert pipeline.runtime.workers is not None and pipeline.runtime.workers.invocations == 0
    results = [m["content"] for m in pipeline.model.requests[1]["messages"] if m["role"] == "tool"]
    assert results[0] == "Error: Unknown tool 'launch_rockets'. Call only the tools you were given."
    assert results[1].startswith(
        "Error: Invalid arguments for 'big_output': kilobytes: Input should be a valid integer"
    )


def test_max_iterations_ends_the_run_with_limit_status(pipeline: Pipeline) -> None:
    pipeline.script(*[Reply(tool_calls=[call("count_once", label=str(i))]) for i in range(4)])
    body = pipeline.finish(pipeline.start("loop forever"))

    assert body["run"]["status"] == "limit"
    assert body["run"]["error"] == "stopped after 4 model turns (the agent's max_iterations)"
    assert len(pipeline.model.requests) == 4


def _payload_sizes(events: list[dict[str, Any]]) -> list[int]:
    sizes = []
    for event in events:
        for key, details in event.items():
            if key.endswith("EventDetails") and isinstance(details, dict):
                sizes.extend(len(v) for k, v in details.items() if k in ("input", "output", "parameters"))
    return sizes


def test_cli_uses_the_configured_endpoint_for_two_parallel_calls(tmp_path: Any, monkeypatch: Any) -> None:
    from toolpipe.infra.local.scripted_model import ScriptedModelServer, ScriptResponder

    replies = [Reply(tool_calls=[call("square_root", x=16), call("sum", a=2, b=3)]), Reply(content="4 and 5")]
    with ScriptedModelServer(ScriptResponder(replies)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "not-checked")
        monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))
        out, err = Capture(), Capture()
        code = main(["run", "root of 16 and 2+3", "--model", "my-model"], out, err)

    assert code == 0, out.text + err.text
    assert err.text == f"toolpipe: state folder {tmp_path}\nmodel endpoint: {server.base_url}\n"
    assert 'call square_root({"x": 16})' in out.text and 'call sum({"a": 2, "b": 3})' in out.text
    assert server.requests[0]["model"] == "my-model"
    results = {m["tool_call_id"]: m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"}
    assert results == {"call_1_0": "4.0", "call_1_1": "5.0"}


def test_a_refused_model_request_fails_the_run_at_once(pipeline: Pipeline) -> None:
    from toolpipe.infra.local.scripted_model import HttpError

    pipeline.script(HttpError(401, {"error": {"message": "Incorrect API key provided", "type": "auth"}}))
    body = pipeline.finish(pipeline.start("hello"))

    assert body["run"]["status"] == "failed"
    assert body["run"]["error"] == (
        "ModelRejectedError: model endpoint refused the request: 401 Incorrect API key provided"
    )
    assert len(pipeline.model.requests) == 1  # not retried by the client nor by Step Functions
    assert [m["kind"] for m in body["messages"]] == ["user"]
