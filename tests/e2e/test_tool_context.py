"""ToolContext through the pipeline: the caller, and per-run state across calls and turns."""

from tests.conftest import Pipeline, call
from toolpipe.infra.local.scripted_model import Reply


def test_state_written_by_one_call_is_read_by_a_later_one(pipeline: Pipeline) -> None:
    pipeline.script(
        Reply(
            tool_calls=[call("remember", key="colour", value="teal"), call("remember", key="size", value="L")]
        ),
        Reply(tool_calls=[call("recall", key="colour"), call("recall", key="size"), call("recall", key="x")]),
        Reply(content="teal, L"),
    )
    body = pipeline.finish(pipeline.start("remember then recall", caller="tenant-42"))

    assert body["run"]["status"] == "succeeded" and body["run"]["caller"] == "tenant-42"
    results = [m["content"] for m in body["messages"] if m["kind"] == "tool_result"]
    # Two parallel calls wrote different keys: neither overwrote the other.
    assert results == ["stored colour for tenant-42", "stored size for tenant-42", "teal", "L", "nothing"]
    first_request_tools = [t["function"]["name"] for t in pipeline.model.requests[0]["tools"]]
    assert "remember" in first_request_tools
    remember_spec = next(
        t for t in pipeline.model.requests[0]["tools"] if t["function"]["name"] == "remember"
    )
    assert set(remember_spec["function"]["parameters"]["properties"]) == {"key", "value"}
