"""Agents used as tools cannot run away: depth and one shared budget bound a tree of runs
(issue #6, item 7)."""

import dataclasses
from typing import Any

import pytest

from tests.conftest import Pipeline, call
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent, agent_tool


@pytest.fixture
def recursive(monkeypatch: pytest.MonkeyPatch) -> Agent:
    agent = Agent(
        name="recursive",
        instructions="Delegate everything.",
        tools=[agent_tool("recursive", name="delegate")],
        max_iterations=3,
    )
    monkeypatch.setitem(AGENTS, "recursive", agent)
    return agent


def _always_delegate(request: dict[str, Any]) -> Reply:
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Reply(content=f"done: {last['content'][:40]}")
    return Reply(tool_calls=[call("delegate", task="do it again")])


def _metas(pipeline: Pipeline) -> list[dict[str, Any]]:
    items = pipeline.runtime.dynamodb.scan(TableName="toolpipe-local")["Items"]
    return [i for i in items if i["sk"]["S"] == "META"]


def test_an_agent_that_has_itself_as_a_tool_stops_three_deep(pipeline: Pipeline, recursive: Agent) -> None:
    pipeline.model.responder = _always_delegate
    run_id = pipeline.start("recurse", agent="recursive")

    body = pipeline.finish(run_id)

    metas = _metas(pipeline)
    assert body["run"]["status"] == "succeeded"
    assert len(metas) == 4  # the root and three nested children, no more
    assert sorted(int(m.get("depth", {}).get("N", 0)) for m in metas) == [0, 1, 2, 3]
    assert all(m["status"]["S"] != "running" for m in metas)
    assert len(pipeline.model.requests) == 8  # each of the 4 runs: one call, one answer
    deepest = [
        m
        for m in pipeline.model.requests
        if any("nest at most 3 deep" in str(x.get("content")) for x in m["messages"])
    ]
    assert len(deepest) == 1


def test_children_share_the_root_agents_budget(
    pipeline: Pipeline, recursive: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        AGENTS, "recursive", dataclasses.replace(recursive, max_tool_calls=2, max_agent_depth=10)
    )
    pipeline.model.responder = _always_delegate
    run_id = pipeline.start("recurse", agent="recursive")

    pipeline.finish(run_id)

    metas = _metas(pipeline)
    assert all(m["status"]["S"] != "running" for m in metas)
    assert len(metas) <= 3  # the third call of the tree is refused
    limited = [m for m in metas if m["status"]["S"] == "limit"]
    assert limited and "the root agent's max_tool_calls is 2" in limited[0]["error"]["S"]
