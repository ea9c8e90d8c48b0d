"""An agent used as a tool by another agent: a child run, its answer returned (issue #3, item 7)."""

import dataclasses
import json

import pytest

from tests.conftest import CALLS, TEST_AGENT, Pipeline, call
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent, agent_tool


@pytest.fixture
def helper(monkeypatch: pytest.MonkeyPatch) -> Agent:
    child = Agent(
        name="helper", instructions="You count things.", tools=[TEST_AGENT.registry.get("count_once")]
    )
    monkeypatch.setitem(AGENTS, "helper", child)
    parent = dataclasses.replace(AGENTS["tester"], tools=[*AGENTS["tester"].tools, agent_tool("helper")])
    monkeypatch.setitem(AGENTS, "tester", parent)
    return child


def _runs(pipeline: Pipeline) -> dict[str, dict]:
    items = pipeline.runtime.dynamodb.scan(TableName="toolpipe-local")["Items"]
    return {i["run_id"]["S"]: i for i in items if i["sk"]["S"] == "META"}


def test_a_child_run_answers_the_parents_call(pipeline: Pipeline, helper: Agent) -> None:
    pipeline.script(
        Reply(tool_calls=[call("helper", task="count the apple")]),  # parent
        Reply(tool_calls=[call("count_once", label="apple")]),  # child
        Reply(content="I counted the apple."),  # child's answer
        Reply(content="The helper counted it."),  # parent
    )
    run_id = pipeline.start("get the apple counted")
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert body["run"]["output"] == "The helper counted it."
    [execution] = body["executions"]
    assert (execution["tool"], execution["status"], execution["result"]) == (
        "helper",
        "ok",
        "I counted the apple.",
    )
    assert CALLS.counts == {"count_once": 1}
    child_request = pipeline.model.requests[1]["messages"]
    assert child_request[-1] == {"role": "user", "content": "count the apple"}
    assert [t["function"]["name"] for t in pipeline.model.requests[1]["tools"]] == ["count_once"]

    [child_id] = [rid for rid in _runs(pipeline) if rid != run_id]
    status, child = pipeline.runtime.api("GET", f"/runs/{child_id}")
    assert status == 200
    assert child["run"]["agent"] == "helper" and child["run"]["status"] == "succeeded"
    assert child["run"]["parent"]["run_id"] == run_id
    token = pipeline.runtime.dynamodb.get_item(
        TableName="toolpipe-local", Key={"pk": {"S": f"RUN#{child_id}"}, "sk": {"S": "PARENT_TOKEN"}}
    )["Item"]["token"]["S"]
    # The parent's task token is a bearer credential: it never leaves the server.
    assert token and token not in json.dumps(child) and token not in json.dumps(body)


def test_a_child_that_stops_early_gives_the_parent_an_error_result(
    pipeline: Pipeline, helper: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(AGENTS, "helper", dataclasses.replace(helper, max_iterations=1))
    pipeline.script(
        Reply(tool_calls=[call("helper", task="count forever")]),
        Reply(tool_calls=[call("count_once", label="1")]),
        Reply(content="The helper gave up."),
    )
    body = pipeline.finish(pipeline.start("x"))

    assert body["run"]["status"] == "succeeded"
    tool_message = next(m for m in pipeline.model.requests[2]["messages"] if m["role"] == "tool")
    assert tool_message["content"] == (
        "Error: the 'helper' agent stopped (limit): stopped after 1 model turns (the agent's max_iterations)"
    )


def test_before_tool_hooks_can_block_an_agent_tool(
    pipeline: Pipeline, helper: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolpipe.shared.agents import BeforeTool, Hooks

    class NoDelegation(Hooks):
        def before_tool(self, event: BeforeTool) -> None:
            if event.call.name == "helper":
                event.blocked = "no delegation here"

    monkeypatch.setitem(AGENTS, "tester", dataclasses.replace(AGENTS["tester"], hooks=[NoDelegation()]))
    pipeline.script(Reply(tool_calls=[call("helper", task="count the apple")]), Reply(content="I could not."))
    body = pipeline.finish(pipeline.start("get the apple counted"))

    assert body["run"]["status"] == "succeeded" and CALLS.counts == {}
    assert len(_runs(pipeline)) == 1  # no child run was started
    tool_message = next(m for m in pipeline.model.requests[1]["messages"] if m["role"] == "tool")
    assert tool_message["content"] == "Error: Blocked: no delegation here"
