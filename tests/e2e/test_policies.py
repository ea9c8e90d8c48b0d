"""Failure policies, tool sets, limits and the execution report, through the pipeline
(issue #3, items 5, 6, 8 and 10)."""

import dataclasses
from typing import Any

import pytest

from tests.conftest import CALLS, Pipeline, call
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, ModelPrice


@pytest.fixture
def agent(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`agent(**changes)`: the test agent with some settings changed, for this test only."""

    def configure(**changes: Any) -> None:
        monkeypatch.setitem(AGENTS, "tester", dataclasses.replace(AGENTS["tester"], **changes))

    return configure


def _tool_messages(pipeline: Pipeline, request: int) -> list[str]:
    return [m["content"] for m in pipeline.model.requests[request]["messages"] if m["role"] == "tool"]


def test_generic_error_policy_hides_the_message_from_the_model_but_keeps_it(
    pipeline: Pipeline, agent: Any
) -> None:
    agent(on_tool_error="generic")
    pipeline.script(Reply(tool_calls=[call("explode", reason="db password expired")]), Reply(content="sorry"))
    body = pipeline.finish(pipeline.start("x"))

    assert _tool_messages(pipeline, 1) == ["Error: the tool 'explode' failed."]
    [execution] = body["executions"]
    assert execution["error_detail"] == "Error: Tool 'explode' failed: RuntimeError: db password expired"
    assert body["run"]["status"] == "succeeded"


def test_fail_policy_ends_the_run(pipeline: Pipeline, agent: Any) -> None:
    agent(on_tool_error="fail")
    pipeline.script(Reply(tool_calls=[call("explode", reason="disk full")]))
    body = pipeline.finish(pipeline.start("x"))

    assert body["run"]["status"] == "failed"
    assert body["run"]["error"] == "Tool 'explode' failed: RuntimeError: disk full"
    assert len(pipeline.model.requests) == 1


def test_repair_turns_are_bounded(pipeline: Pipeline, agent: Any) -> None:
    agent(max_repair_turns=1)
    pipeline.script(
        Reply(tool_calls=[call("count_once", lable="typo")]),
        Reply(tool_calls=[call("count_once")], raw_arguments={0: "{not json"}),
        Reply(content="never asked"),
    )
    body = pipeline.finish(pipeline.start("x"))

    assert _tool_messages(pipeline, 1)[0].startswith(
        "Error: Invalid arguments for 'count_once': label: Field required"
    )
    assert body["run"]["status"] == "limit"
    assert (
        body["run"]["error"]
        == "the model needed repairing (invalid tool calls or answers) in 2 turns (the agent's max_repair_turns is 1)"
    )
    assert len(pipeline.model.requests) == 2
    assert [m["content"] for m in body["messages"] if m["kind"] == "tool_result"][1].startswith(
        "Error: Arguments for 'count_once' are not valid JSON"
    )


def test_a_tool_over_its_timeout_is_answered_timed_out(pipeline: Pipeline, agent: Any) -> None:
    agent(tool_timeout_seconds=0.3)
    pipeline.script(Reply(tool_calls=[call("slow", seconds=3)]), Reply(content="ok"))
    body = pipeline.finish(pipeline.start("x"))

    assert _tool_messages(pipeline, 1) == [
        "Error: Tool 'slow' timed out after 0.3 s. It may still take effect: check before calling it again."
    ]
    assert body["executions"][0]["error_type"] == "ToolTimeoutError"


def test_opt_in_retries_recover_transient_errors_and_give_up_after_the_last(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("flaky", failures=2)]), Reply(content="ok"))
    pipeline.finish(pipeline.start("x"))
    assert _tool_messages(pipeline, 1) == ["answered on attempt 3"]

    CALLS.counts.clear()
    pipeline.script(Reply(tool_calls=[call("flaky", failures=5)]), Reply(content="ok"))
    body = pipeline.finish(pipeline.start("x"))
    # Requests 0 and 1 were the first run's.
    assert _tool_messages(pipeline, 3) == [
        "Error: Tool 'flaky' failed after 3 attempts: ConnectionError: connection reset"
    ]
    assert body["run"]["status"] == "succeeded"


def test_a_run_sees_only_its_allowed_tools_and_dispatch_refuses_others(pipeline: Pipeline) -> None:
    pipeline.script(
        Reply(tool_calls=[call("explode", reason="x"), call("count_once", label="a")]), Reply(content="ok")
    )
    body = pipeline.finish(pipeline.start("x", tools=["count_once"]))

    assert [t["function"]["name"] for t in pipeline.model.requests[0]["tools"]] == ["count_once"]
    assert _tool_messages(pipeline, 1) == ["Error: Tool 'explode' is not available in this run.", "counted a"]
    assert body["run"]["tools"] == ["count_once"]
    assert pipeline.runtime.workers is not None and pipeline.runtime.workers.invocations == 1


def test_an_allow_list_naming_unknown_tools_is_refused(pipeline: Pipeline) -> None:
    status, body = pipeline.runtime.api(
        "POST", "/runs", {"prompt": "x", "agent": "tester", "tools": ["nope", "count_once"]}
    )
    assert (status, body["message"]) == (400, "agent 'tester' has no tools named 'nope'")


def test_a_tool_provider_picks_tools_from_the_run_input(pipeline: Pipeline, agent: Any) -> None:
    agent(
        tool_provider=lambda prompt, caller: ["remember", "recall"] if "memory" in prompt else ["count_once"]
    )
    pipeline.script(Reply(content="a"), Reply(content="b"))
    pipeline.finish(pipeline.start("use your memory"))
    pipeline.finish(pipeline.start("count", tools=["count_once", "slow"]))

    offered = [[t["function"]["name"] for t in r["tools"]] for r in pipeline.model.requests]
    assert offered == [["remember", "recall"], ["count_once"]]


def test_max_tool_calls_ends_the_run(pipeline: Pipeline, agent: Any) -> None:
    agent(max_tool_calls=2)
    pipeline.script(Reply(tool_calls=[call("count_once", label=str(i)) for i in range(3)]))
    body = pipeline.finish(pipeline.start("x"))

    assert body["run"]["status"] == "limit"
    assert body["run"]["error"] == "the model asked for 3 tool calls (the agent's max_tool_calls is 2)"


def test_the_same_call_repeated_ends_the_run(pipeline: Pipeline, agent: Any) -> None:
    agent(max_identical_calls=2)
    pipeline.script(
        Reply(tool_calls=[call("count_once", label="same")]),
        Reply(tool_calls=[call("count_once", label="same")]),
    )
    body = pipeline.finish(pipeline.start("x"))

    assert (
        body["run"]["error"]
        == "the model called 'count_once' with the same arguments 2 times (the agent's max_identical_calls is 2)"
    )
    assert [e["status"] for e in body["executions"]] == ["ok", "pending"]


def test_token_budget_ends_the_run_before_the_next_model_call(pipeline: Pipeline, agent: Any) -> None:
    agent(max_tokens=10)
    pipeline.script(Reply(tool_calls=[call("count_once", label="a")]), Reply(content="never asked"))
    body = pipeline.finish(pipeline.start("x"))

    used = body["run"]["usage"]["prompt_tokens"] + body["run"]["usage"]["completion_tokens"]
    assert body["run"]["status"] == "limit"
    assert body["run"]["error"] == f"used {used} tokens (the agent's max_tokens is 10)"
    assert len(pipeline.model.requests) == 1


def test_cost_is_totalled_and_budgeted(pipeline: Pipeline, agent: Any) -> None:
    agent(price=ModelPrice(input_per_million=1000.0, output_per_million=2000.0), max_cost_usd=0.01)
    pipeline.script(Reply(tool_calls=[call("count_once", label="a")]), Reply(content="never asked"))
    body = pipeline.finish(pipeline.start("x"))

    usage = body["run"]["usage"]
    expected = (usage["prompt_tokens"] * 1000 + usage["completion_tokens"] * 2000) / 1_000_000
    assert body["run"]["cost_usd"] == pytest.approx(expected)
    assert body["run"]["status"] == "limit"
    assert body["run"]["error"] == f"cost ${expected:.4f} (the agent's max_cost_usd is $0.0100)"


def test_the_report_lists_every_execution_and_points_at_long_results(pipeline: Pipeline) -> None:
    pipeline.script(
        Reply(tool_calls=[call("big_output", kilobytes=2), call("explode", reason="no")]),
        Reply(content="done"),
    )
    run_id = pipeline.start("x")
    body = pipeline.finish(run_id)

    big, boom = body["executions"]
    assert big["tool"] == "big_output" and big["arguments"] == {"kilobytes": 2}
    assert (big["status"], big["result_chars"], big["attempts"]) == ("ok", 2000, 1)
    assert big["result"] == "x" * 1000 + "…"
    assert isinstance(big["duration_ms"], int)
    status, whole = pipeline.runtime.api("GET", big["result_ref"])
    assert status == 200 and whole["content"] == "x" * 2000
    assert (boom["status"], boom["error_type"], boom["result_ref"]) == ("error", "ToolExecutionError", None)
