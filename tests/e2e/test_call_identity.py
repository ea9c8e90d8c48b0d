"""A call is its history slot: whatever ids the model sends, each call runs once and the model
gets one result per call, under ids it can pair (issue #6, item 1)."""

from typing import Any

from tests.conftest import CALLS, Pipeline, Reply, call


def _pairs(request: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(ids of the last assistant message's calls, ids of the tool messages after it)."""
    messages = request["messages"]
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    asked = [c["id"] for c in messages[last]["tool_calls"]]
    answered = [m["tool_call_id"] for m in messages[last + 1 :] if m["role"] == "tool"]
    return asked, answered


def test_three_calls_sharing_one_id_each_run_once(pipeline: Pipeline) -> None:
    pipeline.script(
        Reply(
            tool_calls=[call("count_once", label=label) for label in "ABC"],
            raw_ids={0: "call_0", 1: "call_0", 2: "call_0"},
        ),
        Reply(content="counted"),
    )
    body = pipeline.finish(pipeline.start("count three"))

    assert body["run"]["status"] == "succeeded"
    assert CALLS.counts == {"count_once": 3}
    asked, answered = _pairs(pipeline.model.requests[1])
    assert len(set(asked)) == 3 and answered == asked
    results = [m["content"] for m in pipeline.model.requests[1]["messages"] if m["role"] == "tool"]
    assert results == ["counted A", "counted B", "counted C"]


def test_empty_ids_and_an_id_reused_next_to_a_failing_call(pipeline: Pipeline) -> None:
    pipeline.script(
        Reply(tool_calls=[call("count_once", label="1")], raw_ids={0: "call_0"}),
        Reply(
            tool_calls=[call("explode", reason="boom"), call("count_once", label="2")],
            raw_ids={0: "call_0", 1: ""},
        ),
        Reply(content="done"),
    )
    body = pipeline.finish(pipeline.start("go"))

    assert body["run"]["status"] == "succeeded"
    assert CALLS.counts == {"count_once": 2}
    asked, answered = _pairs(pipeline.model.requests[2])
    assert answered == asked and "call_0" not in asked and "" not in asked
    every_id = [
        c["id"]
        for m in pipeline.model.requests[2]["messages"]
        if m["role"] == "assistant"
        for c in m.get("tool_calls", [])
    ]
    assert len(every_id) == len(set(every_id)) == 3
    tool_messages = [m for m in pipeline.model.requests[2]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages][1:] == [
        "Error: Tool 'explode' failed: RuntimeError: boom",
        "counted 2",
    ]
