"""MCP tools through the whole pipeline, against the example MCP server in a real process."""

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import CALLS, Capture, Pipeline, call, count_once
from tests.mcp_server import example_server
from toolpipe.infra.cli import main
from toolpipe.infra.local.scripted_model import Reply, ScriptedModelServer, ScriptResponder
from toolpipe.shared.agents import AGENTS, Agent
from toolpipe.shared.mcp import McpServer

CALL_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with example_server() as url:
        yield url


def _register(monkeypatch: pytest.MonkeyPatch, url: str, **options: Any) -> Agent:
    agent = Agent(
        name="mcp_tester",
        instructions="You test MCP tools.",
        tools=[count_once],
        tool_sources=[McpServer("ex", url=url, call_timeout_seconds=CALL_TIMEOUT, **options)],
        max_iterations=4,
    )
    monkeypatch.setitem(AGENTS, agent.name, agent)
    return agent


def _tool_messages(pipeline: Pipeline, request: int = 1) -> dict[str, str]:
    return {
        m["tool_call_id"]: m["content"]
        for m in pipeline.model.requests[request]["messages"]
        if m["role"] == "tool"
    }


def _results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["kind"] == "tool_result"]


def test_the_model_is_offered_the_servers_tools_and_a_call_runs_in_a_worker(
    pipeline: Pipeline, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register(monkeypatch, server_url)
    pipeline.script(Reply(tool_calls=[call("ex_add", a=2, b=3)]), Reply(content="5"))

    body = pipeline.finish(pipeline.start("add 2 and 3", agent="mcp_tester"))

    assert body["run"]["status"] == "succeeded"
    offered = {t["function"]["name"]: t["function"] for t in pipeline.model.requests[0]["tools"]}
    assert {"count_once", "ex_add", "ex_echo", "ex_fail", "ex_stall", "ex_crash", "ex_document"} <= set(
        offered
    )
    assert offered["ex_add"]["description"].startswith("Add two numbers.")
    assert offered["ex_add"]["parameters"]["required"] == ["a", "b"]
    assert _tool_messages(pipeline) == {"call_1_0": '{"sum": 5.0}'}
    assert pipeline.runtime.workers is not None and pipeline.runtime.workers.invocations == 1


def test_a_stalled_call_times_out_while_its_siblings_complete(
    pipeline: Pipeline, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register(monkeypatch, server_url)
    pipeline.script(
        Reply(
            tool_calls=[
                call("ex_stall", seconds=600),
                call("ex_echo", text="still here"),
                call("count_once", label="local"),
            ]
        ),
        Reply(content="done"),
    )
    started = time.monotonic()

    body = pipeline.finish(pipeline.start("stall", agent="mcp_tester"))

    assert body["run"]["status"] == "succeeded"
    stalled, echoed, counted = _results(body)
    assert stalled["error_type"] == "ToolTimeoutError"
    assert (
        stalled["content"]
        == "Error: Tool 'ex_stall' timed out after 2 s. It may still take effect: check before calling it again."
    )
    assert CALL_TIMEOUT * 1000 <= stalled["duration_ms"] < CALL_TIMEOUT * 1000 + 1000
    assert (echoed["status"], echoed["content"]) == ("ok", "still here")
    assert (counted["status"], counted["content"]) == ("ok", "counted local")
    assert CALLS.counts == {"count_once": 1}
    assert time.monotonic() - started < 15


def test_an_is_error_result_reaches_the_model(
    pipeline: Pipeline, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register(monkeypatch, server_url)
    pipeline.script(Reply(tool_calls=[call("ex_fail", reason="quota exceeded")]), Reply(content="sorry"))

    body = pipeline.finish(pipeline.start("fail", agent="mcp_tester"))

    assert body["run"]["status"] == "succeeded"
    (result,) = _results(body)
    assert (result["status"], result["error_type"]) == ("error", "ToolExecutionError")
    assert _tool_messages(pipeline) == {"call_1_0": "Error: Error executing tool fail: quota exceeded"}


def test_a_server_that_drops_the_connection_mid_call_gives_an_error_result(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    with example_server() as url:  # its own: the call kills it
        _register(monkeypatch, url)
        pipeline.script(Reply(tool_calls=[call("ex_crash")]), Reply(content="it crashed"))
        body = pipeline.finish(pipeline.start("crash", agent="mcp_tester"))

    assert body["run"]["status"] == "succeeded"
    (result,) = _results(body)
    assert result["status"] == "error"
    assert "MCP server 'ex' dropped the connection before answering" in result["content"]
    assert result["duration_ms"] < CALL_TIMEOUT * 1000


def test_a_server_down_at_list_time_fails_the_run_with_a_clear_reason(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register(monkeypatch, f"http://127.0.0.1:{_closed_port()}/mcp")
    pipeline.script(Reply(content="never asked"))
    started = time.monotonic()

    body = pipeline.finish(pipeline.start("anything", agent="mcp_tester"))

    assert body["run"]["status"] == "failed"
    assert "MCP server 'ex' at http://127.0.0.1:" in body["run"]["error"]
    assert "is not reachable (connection refused)" in body["run"]["error"]
    assert pipeline.model.requests == []
    assert time.monotonic() - started < 15


def test_large_results_reach_the_model_by_reference(
    pipeline: Pipeline, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register(monkeypatch, server_url)
    pipeline.script(Reply(tool_calls=[call("ex_big", kilobytes=30)]), Reply(content="big"))

    run_id = pipeline.start("big", agent="mcp_tester")
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    content = _tool_messages(pipeline)["call_1_0"]
    assert content.startswith("y" * 20_000)
    assert f"30000 characters in all, the first 20000 shown. Whole result stored as runs/{run_id}/" in content


def test_a_run_names_its_own_server_only_where_allowed(pipeline: Pipeline, server_url: str) -> None:
    status, body = pipeline.runtime.api("POST", "/runs", {"prompt": "hi", "mcp_servers": [server_url]})

    assert status == 400
    assert "mcp_servers is not enabled here" in body["message"]


def test_cli_run_with_mcp_offers_the_servers_tools_within_the_allow_list(
    server_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS", raising=False)
    script = ScriptResponder(
        [Reply(tool_calls=[call("mcp_document", topic="pipes")]), Reply(content="read the notes")]
    )
    with ScriptedModelServer(script) as model:
        monkeypatch.setenv("OPENAI_BASE_URL", model.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "scripted")
        out = Capture()
        code = main(["run", "Read about pipes", "--mcp", server_url], out)

    assert code == 0, out.text
    assert 'call mcp_document({"topic": "pipes"})' in out.text
    assert "-> mcp_document: Notes on pipes: [resource notes://pipes (text/markdown)] # pipes" in out.text
    offered = {t["function"]["name"] for t in model.requests[0]["tools"]}
    assert {"square_root", "mcp_add", "mcp_document"} <= offered
    tool_message = next(m for m in model.requests[1]["messages"] if m["role"] == "tool")
    assert "[resource link notes://pipes/more (pipes-more)]" in tool_message["content"]


def test_a_runs_allow_list_narrows_its_mcp_tools(
    pipeline: Pipeline, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS", "1")
    pipeline.runtime._cold_start()  # the API reads its settings once per cold start
    pipeline.script(
        Reply(tool_calls=[call("mcp_echo", text="allowed"), call("mcp_add", a=1, b=1)]), Reply(content="ok")
    )

    run_id = pipeline.start("echo", agent="assistant", tools=["mcp_echo"], mcp_servers=[server_url])
    body = pipeline.finish(run_id)

    assert body["run"]["tools"] == ["mcp_echo"]
    assert [t["function"]["name"] for t in pipeline.model.requests[0]["tools"]] == ["mcp_echo"]
    echoed, refused = _results(body)
    assert echoed["content"] == "allowed"
    assert refused["content"] == "Error: Tool 'mcp_add' is not available in this run."


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
