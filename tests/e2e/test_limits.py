"""Step Functions limits as design inputs: measured on the interpreter, not assumed."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Pipeline, _pipeline, call
from toolpipe.infra.cdk.definition import build_definition, loop_states
from toolpipe.infra.local.scripted_model import HttpError, Reply
from toolpipe.infra.local.template import configured_path
from toolpipe.shared.agents import AGENTS, Agent, execution_events_bound, worst_turn_events
from toolpipe.shared.agents.agent import (
    APPROVAL_TASK_RETRIES,
    EVENTS_PER_CALL,
    EVENTS_PER_FAILED_CALL,
    EVENTS_PER_FAILED_ENDING,
    EVENTS_PER_RUN,
    EVENTS_PER_STEP_RETRY,
    EVENTS_PER_TURN,
    MARK_FAILED_RETRIES,
    MODEL_STEP_RETRIES,
)
from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.settings import EXECUTION_EVENT_BUDGET, ExecutionBudget

MODEL_DOWN = HttpError(500, {"error": {"message": "down", "type": "server_error"}})


def _events(pipeline: Pipeline, *replies: Reply) -> int:
    pipeline.script(*replies)
    run_id = pipeline.start("measure")
    pipeline.finish(run_id)
    return len(pipeline.runtime.execution_events(run_id))


def test_history_event_costs_match_the_constants(pipeline: Pipeline) -> None:
    done = Reply(content="done")
    run = _events(pipeline, done)
    one_call = _events(pipeline, Reply(tool_calls=[call("count_once", label="a")]), done)
    two_calls = _events(
        pipeline, Reply(tool_calls=[call("count_once", label="a"), call("count_once", label="b")]), done
    )
    assert (run, one_call - run, two_calls - one_call) == (
        EVENTS_PER_RUN,
        EVENTS_PER_TURN + EVENTS_PER_CALL,
        EVENTS_PER_CALL,
    )


def _fast_retries() -> str:
    """The definition with every retry interval at 1 s: the events a retry writes do not depend
    on how long it waits, and the tests should not wait 10 s for one."""
    definition = build_definition()
    for state in [*definition["States"].values(), *loop_states(definition).values()]:
        for retrier in state.get("Retry", []):
            retrier["IntervalSeconds"] = 1
    return json.dumps(definition)


@pytest.fixture
def failing_model(tmp_path: Path) -> Iterator[Pipeline]:
    # The runtime runs what its template ships: a copy whose definition retries every 1 s.
    template = json.loads(configured_path().read_text())
    (machine,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"
    ]
    machine["Properties"]["DefinitionString"] = _fast_retries()
    fast = tmp_path / "fast-retries.template.json"
    fast.write_text(json.dumps(template))
    # One HTTP error is one failed model step: no retries inside the invocation.
    yield from _pipeline({"TOOLPIPE_MODEL_MAX_RETRIES": "0"}, template_path=fast)


def test_a_model_step_retry_and_a_failed_ending_cost_the_constants(failing_model: Pipeline) -> None:
    done = Reply(content="done")
    plain = _events(failing_model, done)
    retried = _events(failing_model, MODEL_DOWN, done)
    # The ModelCallError retrier allows 2 retries: the third failure goes to MarkFailed.
    failed = _events(failing_model, MODEL_DOWN, MODEL_DOWN, MODEL_DOWN)

    assert retried - plain == EVENTS_PER_STEP_RETRY
    assert failed - plain - 2 * EVENTS_PER_STEP_RETRY == EVENTS_PER_FAILED_ENDING
    assert failed <= execution_events_bound([])


@pytest.mark.parametrize(
    ("env", "error", "seconds"),
    [
        (
            {"TOOLPIPE_CALL_TIMEOUT_SECONDS": "1", "TOOLPIPE_CALL_HEARTBEAT_SECONDS": "30"},
            "States.Timeout",
            1.5,
        ),
        (
            {
                "TOOLPIPE_CALL_TIMEOUT_SECONDS": "30",
                "TOOLPIPE_CALL_HEARTBEAT_SECONDS": "1",
                "TOOLPIPE_HEARTBEAT_EVERY": "60",
            },
            # moto 5.2.5 names a heartbeat timeout States.Timeout (AWS: States.HeartbeatTimeout);
            # the call still failed long before its 30 s timeout, after 1 s of silence.
            "States.Timeout",
            2.5,
        ),
    ],
    ids=["timeout", "heartbeat"],
)
def test_a_call_that_times_out_costs_the_constant(env: dict[str, str], error: str, seconds: float) -> None:
    for pipeline in _pipeline(env):
        events = _events(pipeline, Reply(tool_calls=[call("slow", seconds=seconds)]), Reply(content="late"))
        tool_message = next(m for m in pipeline.model.requests[1]["messages"] if m["role"] == "tool")

        assert tool_message["content"] == f"Error: the tool call did not complete ({error})."
        assert events == EVENTS_PER_RUN + EVENTS_PER_TURN + EVENTS_PER_CALL + EVENTS_PER_FAILED_CALL
        assert events <= execution_events_bound([1])


def test_the_retry_counts_are_the_definitions() -> None:
    states = loop_states(build_definition())
    assert sum(r["MaxAttempts"] for r in states["CallModel"]["Retry"]) == MODEL_STEP_RETRIES
    assert sum(r["MaxAttempts"] for r in states["MarkFailed"]["Retry"]) == MARK_FAILED_RETRIES
    wait = states["RunGatedTools"]["ItemProcessor"]["States"]["WaitForApproval"]
    assert sum(r["MaxAttempts"] for r in wait["Retry"]) == APPROVAL_TASK_RETRIES


def test_the_bound_counts_every_worst_case() -> None:
    turn = EVENTS_PER_TURN + MODEL_STEP_RETRIES * EVENTS_PER_STEP_RETRY
    assert worst_turn_events(0) == turn
    assert worst_turn_events(10) == turn + 10 * (EVENTS_PER_CALL + EVENTS_PER_FAILED_CALL)
    ending = execution_events_bound([])
    assert ending == (
        EVENTS_PER_RUN
        + (MODEL_STEP_RETRIES + MARK_FAILED_RETRIES) * EVENTS_PER_STEP_RETRY
        + EVENTS_PER_FAILED_ENDING
    )
    assert execution_events_bound([3, 0, 10]) == ending + sum(worst_turn_events(c) for c in (3, 0, 10))


def test_every_registered_agent_fits_one_turn_in_an_execution() -> None:
    for agent in AGENTS.values():
        assert execution_events_bound([agent.max_calls_per_turn]) <= EXECUTION_EVENT_BUDGET


def test_long_agents_are_allowed_since_runs_continue_in_fresh_executions() -> None:
    agent = Agent(name="long", instructions="x", max_iterations=1_000, max_calls_per_turn=40)
    assert execution_events_bound([40] * agent.max_iterations) > 25_000


def test_an_agent_whose_one_turn_cannot_fit_an_execution_is_refused() -> None:
    with pytest.raises(
        ValueError,
        match="one turn of 2000 calls could write 20099 Step Functions history events; "
        "one execution's budget is 20000",
    ):
        Agent(name="greedy", instructions="x", max_calls_per_turn=2_000)


def test_the_event_budget_leaves_headroom_and_tests_can_lower_it() -> None:
    assert ExecutionBudget.from_env({}).event_budget == EXECUTION_EVENT_BUDGET < 25_000
    assert ExecutionBudget.from_env({"TOOLPIPE_EXECUTION_EVENT_BUDGET": "300"}).event_budget == 300
    with pytest.raises(ConfigurationError, match="TOOLPIPE_EXECUTION_EVENT_BUDGET"):
        ExecutionBudget.from_env({"TOOLPIPE_EXECUTION_EVENT_BUDGET": "30000"})


def test_calls_past_the_per_turn_limit_get_an_error_result(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    tester = AGENTS["tester"]
    monkeypatch.setitem(
        AGENTS, "tester", Agent(name="tester", instructions="x", tools=tester.tools, max_calls_per_turn=1)
    )
    pipeline.script(
        Reply(tool_calls=[call("count_once", label="a"), call("count_once", label="b")]), Reply(content="ok")
    )
    body = pipeline.finish(pipeline.start("two at once"))

    results = [m["content"] for m in pipeline.model.requests[1]["messages"] if m["role"] == "tool"]
    assert results == [
        "counted a",
        "Error: Not run: at most 1 tool calls are run per reply. Ask again for the rest.",
    ]
    assert body["run"]["status"] == "succeeded"
