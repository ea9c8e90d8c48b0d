"""The model client against a real HTTP server speaking the Chat Completions protocol."""

import time
from collections.abc import Iterator

import pytest

from infra.local.scripted_model import HttpError, Reply, ScriptedModelServer, ScriptResponder
from shared.errors import ModelCallError, ModelRejectedError
from shared.model import to_openai_messages
from shared.model.openai_client import RESERVE_SECONDS, OpenAIModelClient, build_openai_client

RATE_LIMITED = HttpError(
    429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"retry-after": "0.25"}
)


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(ScriptResponder([])) as s:
        yield s


def _client(server: ScriptedModelServer, sleeps: list[float]) -> OpenAIModelClient:
    return OpenAIModelClient(build_openai_client(server.base_url, "k"), max_retries=3, sleep=sleeps.append)


def _deadline(seconds: float = 60) -> float:
    return time.monotonic() + seconds


def test_tool_calls_and_usage_are_read(server: ScriptedModelServer) -> None:
    server.responder = ScriptResponder(
        [Reply(tool_calls=[("sum", {"a": 1, "b": 2}), ("sum", {"a": 3, "b": 4})])]
    )
    reply = _client(server, []).complete(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function"}],
        deadline=_deadline(),
    )
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("sum", '{"a": 1, "b": 2}'),
        ("sum", '{"a": 3, "b": 4}'),
    ]
    assert reply.prompt_tokens > 0 and reply.completion_tokens > 0
    assert server.requests[0]["parallel_tool_calls"] is True


def test_retry_after_is_honoured(server: ScriptedModelServer) -> None:
    server.responder = ScriptResponder([RATE_LIMITED, Reply(content="ok")])
    sleeps: list[float] = []
    reply = _client(server, sleeps).complete(model="m", messages=[], tools=[], deadline=_deadline())
    assert reply.content == "ok"
    assert sleeps == [0.25]
    assert len(server.requests) == 2


def test_a_wait_past_the_deadline_is_not_started(server: ScriptedModelServer) -> None:
    long_wait = HttpError(429, {"error": {"message": "later", "type": "rate_limit"}}, {"retry-after": "120"})
    server.responder = ScriptResponder([long_wait, Reply(content="never asked")])
    sleeps: list[float] = []
    with pytest.raises(ModelCallError, match=r"asked to wait 120\.0 s, past the invocation.s deadline"):
        _client(server, sleeps).complete(model="m", messages=[], tools=[], deadline=_deadline(60))
    assert sleeps == [] and len(server.requests) == 1


def test_client_errors_are_not_retried(server: ScriptedModelServer) -> None:
    server.responder = ScriptResponder(
        [HttpError(400, {"error": {"message": "bad tools", "type": "invalid"}})]
    )
    with pytest.raises(ModelRejectedError, match="refused the request: 400"):
        _client(server, []).complete(model="m", messages=[], tools=[], deadline=_deadline())
    assert len(server.requests) == 1


def test_server_errors_are_retried_then_given_up(server: ScriptedModelServer) -> None:
    server_error = HttpError(503, {"error": {"message": "down", "type": "server"}})
    server.responder = ScriptResponder([server_error] * 4)
    sleeps: list[float] = []
    with pytest.raises(ModelCallError, match="failed after 4 attempts"):
        _client(server, sleeps).complete(model="m", messages=[], tools=[], deadline=_deadline())
    assert len(sleeps) == 3 and all(0 < s <= 8 * 1.25 for s in sleeps)


def test_no_call_is_started_without_time_for_it(server: ScriptedModelServer) -> None:
    with pytest.raises(ModelCallError, match="no time left"):
        _client(server, []).complete(
            model="m", messages=[], tools=[], deadline=_deadline(RESERVE_SECONDS + 1)
        )
    assert server.requests == []


def test_history_renders_as_chat_messages() -> None:
    from shared.messages import AssistantMessage, ToolCall, ToolResult, UserMessage

    history = [
        UserMessage(seq=1, turn=0, content="q"),
        AssistantMessage(seq=2, turn=1, tool_calls=[ToolCall(id="c1", name="sum", arguments="{}")]),
        ToolResult(seq=3, turn=1, call_id="c1", tool="sum", content="3", status="ok"),
    ]
    assert to_openai_messages("sys", history) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "sum", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ]
