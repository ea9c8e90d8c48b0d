"""A run's wall-clock limit (`max_duration`), enforced by the state machine: a timer branch
races the agent loop, waits for the run's deadline in a Wait state, and stops the loop, calls in
flight included."""

import logging
import time
from typing import Any

import pytest

from tests.conftest import TEST_AGENT, Pipeline, call
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent


def _tool_result(run: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in run["messages"] if m["kind"] == "tool_result")


def test_a_run_past_its_max_duration_ends_limit_and_its_call_in_flight_is_not_completed(
    pipeline: Pipeline,
) -> None:
    pipeline.script(Reply(tool_calls=[call("slow", seconds=10)]), Reply(content="never asked"))
    began = time.monotonic()
    run_id = pipeline.start("take your time", max_duration=3)
    run = pipeline.finish(run_id)
    took = time.monotonic() - began

    assert run["run"]["status"] == "limit"
    assert run["run"]["error"] == "the run passed its max_duration of 3 s (waits for people included)"
    assert run["run"]["max_duration"] == 3 and run["run"]["deadline"].endswith("Z")
    assert _tool_result(run)["content"] == (
        "Error: the tool call did not complete (the run passed its max_duration of 3 s)."
    )
    # Ended by the timer at its deadline (moto's Wait drops the deadline's fraction of a second),
    # not after the tool's 10 s; the model was not asked again.
    assert 2 < took < 6, took
    assert len(pipeline.model.requests) == 1
    # The run's ending is the state machine's own: the execution succeeded through OutOfTime.
    assert pipeline.runtime.wait_for_execution(run_id)["status"] == "SUCCEEDED"


def test_the_agents_max_duration_bounds_what_a_start_asks(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    hurried = Agent(
        name="hurried", instructions=TEST_AGENT.instructions, tools=TEST_AGENT.tools, max_duration=3
    )
    monkeypatch.setitem(AGENTS, hurried.name, hurried)
    pipeline.script(Reply(tool_calls=[call("slow", seconds=8)]), Reply(content="never asked"))
    run_id = pipeline.start("take your time", agent="hurried", max_duration=600)
    run = pipeline.finish(run_id)

    assert run["run"]["status"] == "limit"
    assert run["run"]["max_duration"] == 3
    assert "max_duration of 3 s" in run["run"]["error"]


def test_a_run_that_ends_in_time_is_not_held_by_its_timer(
    pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline.script(Reply(tool_calls=[call("count_once", label="a")]), Reply(content="done"))
    began = time.monotonic()
    run_id = pipeline.start("quick", max_duration=3600)
    run = pipeline.finish(run_id)

    assert run["run"]["status"] == "succeeded" and run["run"]["output"] == "done"
    # The loop's end stops the timer: the execution succeeds now, not in an hour.
    assert time.monotonic() - began < 10
    events = pipeline.runtime.execution_events(run_id)
    assert events[-1]["type"] == "ExecutionSucceeded"
    # The loop's Fail state that stops the timer is control flow: the interpreter logs no error.
    # (Only moto's records: another test's runtime, stopping on this worker, may log its own.)
    moto_errors = [r for r in caplog.records if r.name.startswith("moto") and r.levelno >= logging.ERROR]
    assert [r.getMessage()[:80] for r in moto_errors] == []
