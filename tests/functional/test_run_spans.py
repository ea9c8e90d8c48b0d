"""The spans a run's moments make, as an OTLP receiver gets them: GenAI attributes, content only
when asked for, nothing for an unsampled trace, and never an error for the run."""

import socket
from collections.abc import Iterator

import pytest

from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.messages import (
    AssistantMessage,
    RunRecord,
    RunStatus,
    ToolCall,
    ToolResult,
    TraceContext,
    Usage,
)
from toolpipe.shared.telemetry import RunSpans, TracingSettings, run_spans, span_id

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
RESULT = "<b>secret result</b> " + "x" * 10_000


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


def _spans(receiver: OtlpReceiver, capture: bool) -> RunSpans:
    return run_spans(
        TracingSettings(enabled=True, capture_content=capture, endpoint=f"{receiver.endpoint}/v1/traces")
    )


def _run(**fields: object) -> RunRecord:
    defaults: dict[str, object] = {
        "status": RunStatus.RUNNING,
        "trace": TraceContext(trace_id=TRACE),
        "created_at": "2026-11-26T10:00:00.000+00:00",
    }
    return RunRecord(run_id="run-1", agent="payer", **(defaults | fields))  # type: ignore[arg-type]


def _moments(spans: RunSpans) -> None:
    run = _run()
    reply = AssistantMessage(
        seq=2,
        turn=1,
        content="calling",
        tool_calls=[ToolCall(id="c1", name="wire_money", arguments='{"to": "ana"}')],
        usage=Usage(prompt_tokens=120, completion_tokens=8, model_calls=1),
        started_at="2026-11-26T10:00:01.000+00:00",
        created_at="2026-11-26T10:00:02.500+00:00",
    )
    spans.model_called(run, reply, "gpt-4o-mini", "tool_calls", "gpt-4o-mini-2024-07-18")
    result = ToolResult(
        seq=3,
        turn=1,
        call_id="c1",
        tool="wire_money",
        content=RESULT,
        status="error",
        error_type=ErrorKind.IN_DOUBT,
        attempts=2,
        started_at="2026-11-26T10:00:03.000+00:00",
        created_at="2026-11-26T10:00:04.000+00:00",
    )
    spans.tool_call_completed(run, result)
    ended = run.model_copy(
        update={
            "status": RunStatus.FAILED,
            "error": "the secret failure",
            "updated_at": "2026-11-26T10:00:05.000+00:00",
        }
    )
    spans.run_ended(ended)
    spans.flush()


def _by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans}


def test_spans_carry_the_gen_ai_attributes_and_no_content_by_default(receiver: OtlpReceiver) -> None:
    _moments(_spans(receiver, capture=False))
    spans = _by_name(receiver.wait_for(lambda got: len(got) == 3))

    chat = spans["chat gpt-4o-mini"]
    assert chat.trace_id == TRACE
    assert chat.span_id == span_id("run-1", "model", 2)
    assert chat.parent_span_id == span_id("run-1", "run")
    assert chat.seconds == 1.5
    assert {k: v for k, v in chat.attributes.items() if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.response.finish_reasons": ["tool_calls"],
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 8,
        "gen_ai.agent.name": "payer",
        "gen_ai.conversation.id": "run-1",
    }
    call = spans["execute_tool wire_money"]
    assert call.span_id == span_id("run-1", "call", 3)
    assert call.attributes["gen_ai.tool.call.id"] == "c1"
    assert call.attributes["toolpipe.call.in_doubt"] is True
    assert call.attributes["toolpipe.call.attempts"] == 2
    assert call.attributes["error.type"] == "InDoubt" and call.status_code == 2
    run = spans["invoke_agent payer"]
    assert run.parent_span_id == "" and run.seconds == 5.0
    assert run.attributes["error.type"] == "failed"

    text = repr([s.attributes for s in spans.values()])
    assert "secret" not in text and "ana" not in text and "calling" not in text


def test_content_is_captured_when_asked_and_cut(receiver: OtlpReceiver) -> None:
    _moments(_spans(receiver, capture=True))
    spans = _by_name(receiver.wait_for(lambda got: len(got) == 3))
    result = spans["execute_tool wire_money"].attributes["gen_ai.tool.call.result"]
    assert result.startswith("<b>secret result</b>") and len(result) == 4_096 and result.endswith("…")
    output = spans["chat gpt-4o-mini"].attributes["gen_ai.output.messages"]
    assert '"name": "wire_money"' in output and '"content": "calling"' in output


def test_an_unsampled_trace_exports_nothing(receiver: OtlpReceiver) -> None:
    spans = _spans(receiver, capture=False)
    spans.run_ended(_run(trace=TraceContext(trace_id=TRACE, sampled=False), status=RunStatus.SUCCEEDED))
    spans.flush()
    assert receiver.requests == 0


def test_a_collector_that_is_down_or_a_bad_record_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}/v1/traces"
    spans = run_spans(TracingSettings(enabled=True, endpoint=endpoint))
    spans.run_ended(_run(status=RunStatus.SUCCEEDED, updated_at="not a time"))
    assert "span not made: invoke_agent payer" in caplog.text
    spans.run_ended(_run(status=RunStatus.SUCCEEDED))
    spans.flush()  # nothing listens: the exporter gives up, the invocation goes on


def test_names_from_a_hostile_model_are_cut(receiver: OtlpReceiver) -> None:
    spans = _spans(receiver, capture=False)
    name = "t" * 5_000
    result = ToolResult(seq=3, turn=1, call_id="c" * 5_000, tool=name, content="x", status="ok")
    spans.tool_call_completed(_run(), result)
    spans.flush()
    [span] = receiver.wait_for(lambda got: len(got) == 1)
    assert len(span.name) == 256 and span.name.endswith("…")
    assert len(span.attributes["gen_ai.tool.name"]) == 256
    assert len(span.attributes["gen_ai.tool.call.id"]) == 256
