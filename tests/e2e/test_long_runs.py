"""A run longer than one execution's history-event budget goes on in a fresh execution."""

from collections.abc import Iterator

import pytest

from tests.conftest import CALLS, Pipeline, Reply, _pipeline, call


@pytest.fixture
def small_budget() -> Iterator[Pipeline]:
    # One turn of one call fits, two do not: the run must continue after its second turn.
    yield from _pipeline({"TOOLPIPE_EXECUTION_EVENT_BUDGET": "250"})


def test_a_run_continues_in_a_fresh_execution_and_loses_nothing(small_budget: Pipeline) -> None:
    small_budget.script(
        Reply(tool_calls=[call("count_once", label="1")]),
        Reply(tool_calls=[call("count_once", label="2")]),
        Reply(tool_calls=[call("count_once", label="3")]),
        Reply(content="three counted"),
    )
    run_id = small_budget.start("count three times")

    body = small_budget.finish(run_id)

    assert body["run"]["status"] == "succeeded" and body["run"]["output"] == "three counted"
    assert body["run"]["execution"] == 2
    runtime = small_budget.runtime
    names = sorted(
        e["name"]
        for e in runtime.sfn.list_executions(stateMachineArn=runtime.state_machine_arn)["executions"]
    )
    assert names == sorted([run_id, f"{run_id}--2"])
    assert CALLS.counts == {"count_once": 3}
    assert len(small_budget.model.requests) == 4  # the continuation asked the model nothing twice
    kinds = [m["kind"] for m in body["messages"]]
    assert kinds == ["user"] + ["assistant", "tool_result"] * 3 + ["assistant"]
