"""Hooks observe, modify or short-circuit model and tool calls (issue #3, item 9)."""

import dataclasses
import json

import pytest

from tests.conftest import CALLS, Pipeline, call
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, AfterModel, AfterTool, BeforeModel, BeforeTool, Hooks
from toolpipe.shared.messages import ToolCall
from toolpipe.shared.model import ModelReply


class Guard(Hooks):
    """Blocks one tool, rewrites another's arguments, answers a third, redacts results."""

    def before_model(self, event: BeforeModel) -> None:
        event.messages.insert(1, {"role": "system", "content": "Policy: be brief."})
        event.tools = [t for t in event.tools if t["function"]["name"] != "slow"]

    def after_model(self, event: AfterModel) -> None:
        if event.reply.content:
            event.reply = dataclasses.replace(
                event.reply, content=event.reply.content.replace("secret", "[redacted]")
            )

    def before_tool(self, event: BeforeTool) -> None:
        if event.call.name == "explode":
            event.blocked = "explode is disabled on weekends"
        elif event.call.name == "count_once":
            args = json.loads(event.call.arguments)
            event.call = ToolCall(
                id=event.call.id, name=event.call.name, arguments=json.dumps({"label": args["label"].upper()})
            )
        elif event.call.name == "recall":
            event.result = "cached answer"

    def after_tool(self, event: AfterTool) -> None:
        if "COUNTED" in event.execution.content.upper():
            event.execution = dataclasses.replace(
                event.execution, content=event.execution.content + " (checked)"
            )


class Canned(Hooks):
    def before_model(self, event: BeforeModel) -> None:
        event.reply = ModelReply(content="answered by a hook")


def _with(monkeypatch: pytest.MonkeyPatch, *hooks: Hooks) -> None:
    monkeypatch.setitem(AGENTS, "tester", dataclasses.replace(AGENTS["tester"], hooks=list(hooks)))


def test_hooks_modify_block_and_answer(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    _with(monkeypatch, Guard())
    pipeline.script(
        Reply(
            tool_calls=[call("explode", reason="x"), call("count_once", label="a"), call("recall", key="k")]
        ),
        Reply(content="the secret is out"),
    )
    body = pipeline.finish(pipeline.start("x"))

    first = pipeline.model.requests[0]
    assert first["messages"][1] == {"role": "system", "content": "Policy: be brief."}
    assert "slow" not in [t["function"]["name"] for t in first["tools"]]
    results = [m["content"] for m in pipeline.model.requests[1]["messages"] if m["role"] == "tool"]
    assert results == [
        "Error: Blocked: explode is disabled on weekends",
        "counted A (checked)",
        "cached answer",
    ]
    assert CALLS.counts == {"count_once": 1}
    assert body["run"]["output"] == "the [redacted] is out"
    assert body["executions"][0]["error_type"] == "BlockedByHook"


def test_a_hook_can_answer_instead_of_the_model(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    _with(monkeypatch, Canned())
    body = pipeline.finish(pipeline.start("x"))

    assert body["run"]["output"] == "answered by a hook"
    assert pipeline.model.requests == []
