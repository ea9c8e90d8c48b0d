"""Every API response fits a Lambda response (6 MB), whatever the run holds; what is cut is
still reachable, item by item or through a presigned S3 URL."""

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.conftest import TEST_AGENT, Pipeline, Reply, _pipeline, big_output, call
from toolpipe.infra.local import lambdas
from toolpipe.shared.agents import AGENTS, Agent
from toolpipe.shared.aws_clients import AwsClients
from toolpipe.shared.messages import AssistantMessage, RunRecord, RunStatus, ToolCall, ToolResult, UserMessage
from toolpipe.shared.runs.factory import build_store
from toolpipe.shared.settings import StoreSettings

# https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html: 6 MB, each way.
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024


@pytest.fixture
def sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The byte size of every API response, as the Lambda service would return it."""
    seen: list[int] = []
    real = lambdas.call_handler

    def measured(handler: str, event: Any, context: Any) -> Any:
        response = real(handler, event, context)
        if handler.startswith("toolpipe.functions.api."):
            seen.append(len(json.dumps(response)))
        return response

    monkeypatch.setattr(lambdas, "call_handler", measured)
    return seen


def _get(pipeline: Pipeline, path: str) -> Any:
    status, body = pipeline.runtime.api("GET", path)
    assert status == 200, body
    return body


def _pages(pipeline: Pipeline, first: str, key: str, next_key: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    page: str | None = first
    while page:
        body = _get(pipeline, page)
        entries.extend(body[key])
        page = body[next_key]
    return entries


def test_a_20_mb_result_and_a_1_mb_answer_stay_reachable_in_small_responses(
    pipeline: Pipeline, sizes: list[int]
) -> None:
    answer = "y" * 1_000_000
    pipeline.script(Reply(tool_calls=[call("big_output", kilobytes=20_000)]), Reply(content=answer))
    run_id = pipeline.start("make it big")
    pipeline.runtime.wait_for_execution(run_id)

    shown = _get(pipeline, f"/runs/{run_id}")
    [execution] = shown["executions"]
    assert execution["result_chars"] < 30_000  # the model saw a preview
    full = requests.get(execution["full_result_url"], timeout=30)
    assert full.status_code == 200 and len(full.content) == 20_000_000

    listed = _pages(pipeline, f"/runs/{run_id}/messages", "messages", "next")
    reply = next(m for m in listed if m["kind"] == "assistant" and not m["tool_calls"])
    assert reply["truncated"] == {"content": 1_000_000} and len(reply["content"]) < 2_000
    assert _get(pipeline, reply["ref"])["content"] == answer
    # The answer is past DynamoDB's item limit: the run record keeps its beginning, S3 the whole.
    assert shown["run"]["status"] == "succeeded" and shown["run"]["output_chars"] == 1_000_000
    assert requests.get(shown["run"]["output_url"], timeout=30).text == answer

    assert sizes and max(sizes) < LAMBDA_RESPONSE_LIMIT


@pytest.fixture
def roomy_results() -> Iterator[Pipeline]:
    """An agent that shows the model whole results of many MB: history items that large."""
    agent = Agent(name="roomy", instructions="Big results.", tools=[big_output], max_result_chars=10_000_000)
    AGENTS[agent.name] = agent
    try:
        yield from _pipeline()
    finally:
        AGENTS.pop(agent.name)


def test_an_item_too_large_for_a_response_is_answered_with_a_presigned_url(
    roomy_results: Pipeline, sizes: list[int]
) -> None:
    pipeline = roomy_results
    pipeline.script(Reply(tool_calls=[call("big_output", kilobytes=6_000)]), Reply(content="done"))
    run_id = pipeline.start("one huge item", agent="roomy")
    pipeline.runtime.wait_for_execution(run_id)

    body = _get(pipeline, f"/runs/{run_id}/messages/3")
    assert body["kind"] == "tool_result" and body["truncated"] == {"content": 6_000_000}
    stored = requests.get(body["url"], timeout=30)
    assert stored.status_code == 200 and len(json.loads(stored.content)["content"]) == 6_000_000
    assert max(sizes) < LAMBDA_RESPONSE_LIMIT


EMOJI = "\U0001f600"  # 14 bytes in a Lambda response: a surrogate pair, escaped twice


def _finished_run(run_id: str, replies: int, calls_per_reply: int, text: str) -> str:
    """A run written straight into the store, `text` in every string the model or a tool made."""
    from toolpipe.infra.local.runtime import BUCKET, LOCAL_CALLER, TABLE

    store = build_store(
        StoreSettings.from_env({"TABLE_NAME": TABLE, "BUCKET_NAME": BUCKET}), aws=AwsClients()
    )
    record = RunRecord(run_id=run_id, agent=TEST_AGENT.name, status=RunStatus.RUNNING, caller=LOCAL_CALLER)
    assert store.create_run(record, UserMessage(seq=1, turn=0, content=text))
    seq = 2
    for turn in range(1, replies + 1):
        calls = [
            ToolCall(id=f"c{seq + 1 + i}{text}", name=f"t{text}", arguments=text)
            for i in range(calls_per_reply)
        ]
        assert store.append(run_id, AssistantMessage(seq=seq, turn=turn, content=text, tool_calls=calls))
        for i, made in enumerate(calls):
            result = ToolResult(
                seq=seq + 1 + i,
                turn=turn,
                call_id=made.id,
                tool=made.name,
                content=text,
                status="error",
                error_type="ToolExecutionError",
                error_detail=text,
            )
            assert store.append(run_id, result)
        seq += 1 + calls_per_reply
    return run_id


def test_a_thousand_calls_are_paged_in_order(pipeline: Pipeline, sizes: list[int]) -> None:
    run_id = _finished_run("many-calls", replies=10, calls_per_reply=100, text="x")

    executions = _pages(pipeline, f"/runs/{run_id}", "executions", "executions_next")
    assert [e["seq"] for e in executions] == [r * 101 + 2 + i for r in range(10) for i in range(1, 101)]
    messages = _pages(pipeline, f"/runs/{run_id}/messages", "messages", "next")
    assert [m["seq"] for m in messages] == list(range(1, 1 + 1 + 10 * 101))
    assert max(sizes) < LAMBDA_RESPONSE_LIMIT


def test_costly_strings_end_pages_by_size_not_count(pipeline: Pipeline, sizes: list[int]) -> None:
    run_id = _finished_run("costly-calls", replies=2, calls_per_reply=60, text=EMOJI * 1_100)

    first = _get(pipeline, f"/runs/{run_id}")
    assert 1 < len(first["executions"]) < 100 and first["executions_next"]
    assert first["executions"][0]["arguments_chars"] == 1_100 and first["executions"][0]["arguments_ref"]
    executions = _pages(pipeline, f"/runs/{run_id}", "executions", "executions_next")
    assert len(executions) == 120 and len({e["seq"] for e in executions}) == 120

    page = _get(pipeline, f"/runs/{run_id}/messages")
    assert len(page["messages"]) < 100 and page["next"]
    messages = _pages(pipeline, f"/runs/{run_id}/messages", "messages", "next")
    assert [m["seq"] for m in messages] == list(range(1, 1 + 1 + 2 * 61))
    reply = messages[1]
    assert reply["truncated"]["tool_calls"] == 60 and len(reply["tool_calls"]) == 20
    assert max(sizes) < LAMBDA_RESPONSE_LIMIT
