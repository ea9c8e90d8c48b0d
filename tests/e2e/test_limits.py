"""Step Functions limits as design inputs: measured on the interpreter, not assumed."""

import pytest

from infra.local.scripted_model import Reply
from shared.agents import AGENTS, Agent, history_events
from shared.agents.agent import EVENTS_PER_CALL, EVENTS_PER_RUN, EVENTS_PER_TURN
from tests.conftest import Pipeline, call


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


def test_every_registered_agent_fits_the_history_limit() -> None:
    for agent in AGENTS.values():
        assert history_events(agent.max_iterations, agent.max_calls_per_turn) <= 25_000


def test_an_agent_that_could_overflow_the_history_is_refused() -> None:
    with pytest.raises(
        ValueError, match="100 turns of 40 calls could write 33113 Step Functions history events"
    ):
        Agent(name="greedy", instructions="x", max_iterations=100, max_calls_per_turn=40)


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
