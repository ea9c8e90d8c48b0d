"""Scenario 7: recursive and runaway agents through the pipeline: an agent that has itself as a
tool (`agent_tool`) and a model that always asks for more tool calls. Every run ends (none left
`running`), agent runs nest at most 3 deep, and model calls stay within a bound set by the
agent's limits."""

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import TEST_AGENT, Pipeline, _pipeline
from tests.reliability.figures import record
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent, agent_tool

MAX_ITERATIONS = 3
MAX_TOOL_CALLS = 12
MAX_DEPTH = 3
CALLS_PER_TURN = 2


class AlwaysTools:
    """A model that never answers: every reply asks for tools again (new arguments each time,
    so only the run limits, not the identical-call rule, can stop it)."""

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            n = next(self._counter)
        names = {t["function"]["name"] for t in request.get("tools", [])}
        calls: list[tuple[str, dict[str, Any]]] = [("count_once", {"label": f"again {n}"})]
        if "recur" in names:
            calls.insert(0, ("recur", {"task": f"go one level deeper ({n})"}))
        return Reply(tool_calls=calls)


@pytest.fixture
def agents(monkeypatch: pytest.MonkeyPatch) -> None:
    count_once = TEST_AGENT.registry.get("count_once")
    limits: dict[str, Any] = {
        "max_iterations": MAX_ITERATIONS,
        "max_tool_calls": MAX_TOOL_CALLS,
        "max_agent_depth": MAX_DEPTH,
        "max_calls_per_turn": CALLS_PER_TURN,
    }
    monkeypatch.setitem(
        AGENTS,
        "recur",
        Agent(name="recur", instructions="Recurse.", tools=[agent_tool("recur"), count_once], **limits),
    )
    monkeypatch.setitem(
        AGENTS, "runaway", Agent(name="runaway", instructions="Loop.", tools=[count_once], **limits)
    )


@pytest.fixture
def looping(agents: None) -> Iterator[Pipeline]:
    # A call a worker drops (the moto race in test_token_race.py) ends in a heartbeat timeout
    # after 10 s instead of 15 minutes; a child run beats its parent's call at every step.
    yield from _pipeline({"TOOLPIPE_CALL_HEARTBEAT_SECONDS": "10"})


def _items(p: Pipeline) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in p.runtime.dynamodb.get_paginator("scan").paginate(TableName="toolpipe-local"):
        items.extend(page["Items"])
    return items


def test_recursive_and_runaway_agents_end(looping: Pipeline) -> None:
    looping.model.responder = AlwaysTools()
    roots = [looping.start("recurse", agent="recur"), looping.start("loop", agent="runaway")]
    for root in roots:
        looping.runtime.wait_for_execution(root, timeout=150)
    # Child runs end before their parent's call is answered; wait for any stragglers anyway.
    deadline = time.monotonic() + 60
    while looping.runtime.sfn.list_executions(
        stateMachineArn=looping.runtime.state_machine_arn, statusFilter="RUNNING"
    )["executions"]:
        assert time.monotonic() < deadline, "executions still running"
        time.sleep(0.05)

    items = _items(looping)
    records = [i for i in items if i["sk"]["S"] == "META"]
    timed_out = sum("the tool call did not complete" in i.get("data", {}).get("S", "") for i in items)
    statuses = [r["status"]["S"] for r in records]
    depths = [int(r.get("depth", {"N": "0"})["N"]) for r in records]
    model_calls = len(looping.model.requests)
    # Each run asks the model at most max_iterations times; a tree of runs holds at most one run
    # per agent-tool call, and the tree's calls are capped by the root's max_tool_calls (a turn
    # may pass the cap by its own calls).
    runs_bound = 1 + MAX_TOOL_CALLS + CALLS_PER_TURN
    calls_bound = (runs_bound + 1) * MAX_ITERATIONS  # + 1: the runaway root
    left_running = statuses.count("running")
    met = left_running == 0 and max(depths) <= MAX_DEPTH and model_calls <= calls_bound
    record(
        "7 recursive and runaway agents (pipeline)",
        tried=len(records),
        survived=len(records) - left_running,
        lost=left_running,
        duplicated=0,
        goal=f"0 runs left running, depth <= {MAX_DEPTH}, model calls <= {calls_bound}",
        met=met,
        note=(
            f"an agent with itself as a tool and one with only count_once, both with a model that always asks "
            f"for tools (max_iterations={MAX_ITERATIONS}, max_tool_calls={MAX_TOOL_CALLS} for the tree, "
            f"max_agent_depth={MAX_DEPTH}): {len(records)} runs, deepest {max(depths)}, {model_calls} model "
            f"calls; endings {', '.join(f'{s}={statuses.count(s)}' for s in sorted(set(statuses)))}; "
            f"{timed_out} call(s) ended without a worker result (a heartbeat or task timeout: see scenario 9)."
        ),
    )
    assert left_running == 0
    assert max(depths) <= MAX_DEPTH
    assert model_calls <= calls_bound
