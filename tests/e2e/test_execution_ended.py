"""An execution that ends outside the state machine's own Catch still ends its run.

Stopped by hand, past its own TimeoutSeconds, or failed by Step Functions itself: no state of
the execution runs to mark the run, so the stack's EventBridge rule on execution status
changes hands the ending to the orchestrator (locally: `infra/local/execution_events.py`).
"""

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_AGENT, Pipeline, _pipeline, call
from toolpipe.infra.cdk.definition import execution_ended_pattern, execution_ended_request, matches
from toolpipe.infra.local.execution_events import status_change_event
from toolpipe.infra.local.lambdas import LocalContext, call_handler
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent, agent_tool
from toolpipe.shared.tools import tool

ORCHESTRATOR = "toolpipe.functions.orchestrator.handler.lambda_handler"
RELEASE = threading.Event()
STARTED = threading.Event()  # set when a call of `hold` runs


@tool
def hold(label: str) -> str:
    """Wait until the test lets the call finish.

    Args:
        label: Any text.
    """
    STARTED.set()
    RELEASE.wait(timeout=30)
    return f"released {label}"


@pytest.fixture
def holding(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Calls of `hold` stay in flight until the test is over (released before the runtime stops)."""
    monkeypatch.setitem(AGENTS, "tester", dataclasses.replace(TEST_AGENT, tools=[*TEST_AGENT.tools, hold]))
    RELEASE.clear()
    yield
    RELEASE.set()


def _wait_until_waiting_on_a_call(pipeline: Pipeline, run_id: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout

    def events() -> list[dict[str, Any]]:
        try:
            return pipeline.runtime.execution_events(run_id)
        except pipeline.runtime.sfn.exceptions.ExecutionDoesNotExist:
            return []  # a child run is written just before its execution starts

    while not any(e["type"] == "TaskSubmitted" for e in events()):
        assert time.monotonic() < deadline, f"run {run_id} never dispatched a call"
        time.sleep(0.02)


def _stop(pipeline: Pipeline, run_id: str) -> None:
    pipeline.runtime.sfn.stop_execution(
        executionArn=pipeline.runtime.execution_arn(run_id), cause="stopped by an operator"
    )


def test_a_run_stopped_by_hand_is_failed_with_the_reason(pipeline: Pipeline, holding: None) -> None:
    pipeline.script(Reply(tool_calls=[call("hold", label="x")]), Reply(content="never asked"))
    run_id = pipeline.start("take your time")
    _wait_until_waiting_on_a_call(pipeline, run_id)

    _stop(pipeline, run_id)
    body = pipeline.finish(run_id)

    assert pipeline.runtime.wait_for_execution(run_id)["status"] == "ABORTED"
    assert body["run"]["status"] == "failed"
    assert body["run"]["error"] == "execution aborted (stopped outside the run)"
    assert len(pipeline.model.requests) == 1


@pytest.fixture
def slow_helper(holding: None, monkeypatch: pytest.MonkeyPatch) -> Agent:
    child = Agent(name="helper", instructions="You wait.", tools=[hold])
    monkeypatch.setitem(AGENTS, "helper", child)
    parent = dataclasses.replace(AGENTS["tester"], tools=[*AGENTS["tester"].tools, agent_tool("helper")])
    monkeypatch.setitem(AGENTS, "tester", parent)
    return child


def _child_of(pipeline: Pipeline, parent_id: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while True:
        items = pipeline.runtime.dynamodb.scan(TableName="toolpipe-local")["Items"]
        children = [
            i["run_id"]["S"] for i in items if i["sk"]["S"] == "META" and i["run_id"]["S"] != parent_id
        ]
        if children:
            return children[0]
        assert time.monotonic() < deadline, "no child run started"
        time.sleep(0.02)


def test_stopping_a_child_run_answers_the_parents_call(pipeline: Pipeline, slow_helper: Agent) -> None:
    pipeline.script(
        Reply(tool_calls=[call("helper", task="wait a second")]),  # parent
        Reply(tool_calls=[call("hold", label="x")]),  # child, stopped while its call runs
        Reply(content="The helper was stopped."),  # parent, reading the error result
    )
    parent_id = pipeline.start("get the helper to wait")
    child_id = _child_of(pipeline, parent_id)
    _wait_until_waiting_on_a_call(pipeline, child_id)

    _stop(pipeline, child_id)
    body = pipeline.finish(parent_id)

    assert body["run"]["status"] == "succeeded"
    assert body["run"]["output"] == "The helper was stopped."
    tool_message = next(m for m in pipeline.model.requests[2]["messages"] if m["role"] == "tool")
    assert tool_message["content"] == (
        "Error: the 'helper' agent stopped (failed): execution aborted (stopped outside the run)"
    )
    status, child = pipeline.runtime.api("GET", f"/runs/{child_id}")
    assert status == 200 and child["run"]["status"] == "failed"


def test_a_run_left_running_at_shutdown_is_resumed_at_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`toolpipe serve` stopped with a run in progress: the saved run is not failed; the next
    start resumes it, and the call the old process was running ends in doubt, never twice."""
    monkeypatch.setitem(AGENTS, "tester", dataclasses.replace(TEST_AGENT, tools=[*TEST_AGENT.tools, hold]))
    RELEASE.clear()
    STARTED.clear()
    # The old process's tool stays blocked to the end: in one test process, a thread left from
    # the first runtime could otherwise write into the next one's state, which a real restart
    # (a new process) never sees.
    try:
        for pipeline in _pipeline(state_dir=tmp_path):
            pipeline.script(Reply(tool_calls=[call("hold", label="x")]))
            run_id = pipeline.start("never finishes")
            _wait_until_waiting_on_a_call(pipeline, run_id)
            # The old process runs the call (a dispatched call may wait in the queue a while on
            # a loaded machine: then the next process would simply run it).
            assert STARTED.wait(30), "the call never started"
            pipeline.runtime.drain_seconds = 0.1
        for pipeline in _pipeline(state_dir=tmp_path, workers=0):  # a viewer resumes nothing
            _, body = pipeline.runtime.api("GET", f"/runs/{run_id}")
            assert body["run"]["status"] == "running"
        for pipeline in _pipeline(state_dir=tmp_path):
            pipeline.script(Reply(content="I will check the hold first."))
            body = pipeline.finish(run_id)
            RELEASE.set()  # while a runtime is up: the old thread's late write meets a taken slot
            time.sleep(0.2)
    finally:
        RELEASE.set()

    assert body["run"]["status"] == "succeeded" and body["run"]["execution"] == 2
    [result] = [m for m in body["messages"] if m["kind"] == "tool_result"]
    assert result["error_type"] == "InDoubt"


def test_a_run_the_model_step_already_ended_keeps_its_ending(pipeline: Pipeline) -> None:
    """The rule also sees executions our own Catch failed, and repeated events: no change."""
    pipeline.script(Reply(content="all done"))
    run_id = pipeline.start("quick")
    pipeline.finish(run_id)
    event = {"action": "execution_ended", "execution": run_id, "status": "FAILED"}

    answer = call_handler(ORCHESTRATOR, event, LocalContext("orchestrator", 60))

    assert answer == {"status": "failed"}
    code, body = pipeline.runtime.api("GET", f"/runs/{run_id}")
    assert code == 200
    assert (body["run"]["status"], body["run"]["output"]) == ("succeeded", "all done")


@pytest.mark.parametrize(
    ("status", "error"),
    [
        ("TIMED_OUT", "execution timed out (it passed the state machine's TimeoutSeconds)"),
        ("FAILED", "execution failed outside the model step (see its Step Functions history)"),
    ],
)
def test_each_ending_names_its_reason(pipeline: Pipeline, holding: None, status: str, error: str) -> None:
    pipeline.script(Reply(tool_calls=[call("hold", label="x")]), Reply(content="never asked"))
    run_id = pipeline.start("take your time")
    _wait_until_waiting_on_a_call(pipeline, run_id)
    # A continuation execution (`<run_id>--<n>`) ends the same run.
    event = {"action": "execution_ended", "execution": f"{run_id}--2", "status": status}

    call_handler(ORCHESTRATOR, event, LocalContext("orchestrator", 60))

    code, body = pipeline.runtime.api("GET", f"/runs/{run_id}")
    assert code == 200
    assert (body["run"]["status"], body["run"]["error"]) == ("failed", error)
    _stop(pipeline, run_id)


def test_an_execution_of_no_run_is_ignored(pipeline: Pipeline) -> None:
    event = {"action": "execution_ended", "execution": "started-by-hand", "status": "ABORTED"}
    assert call_handler(ORCHESTRATOR, event, LocalContext("orchestrator", 60)) == {"status": "ignored"}


def test_the_local_rule_is_the_stacks_rule(pipeline: Pipeline) -> None:
    """The emitted event has AWS's shape; the rule picks the bad endings of this machine only."""

    @dataclasses.dataclass
    class Ended:
        name: str
        status: str
        state_machine_arn: str
        exec_arn: str = "arn:aws:states:us-east-1:123456789012:execution:m:x"
        account_id: str = "123456789012"
        region_name: str = "us-east-1"
        start_date: Any = None
        stop_date: Any = None
        error: str | None = None
        cause: str | None = None

    arn = pipeline.runtime.state_machine_arn
    pattern = execution_ended_pattern(arn)
    aborted = status_change_event(Ended("r1--3", "ABORTED", arn))
    assert matches(pattern, aborted)
    assert execution_ended_request(aborted) == {
        "action": "execution_ended",
        "execution": "r1--3",
        "status": "ABORTED",
        "execution_arn": "arn:aws:states:us-east-1:123456789012:execution:m:x",
    }
    # Every ending reaches the orchestrator: a succeeded one too, to count its transitions.
    assert matches(pattern, status_change_event(Ended("r1", "SUCCEEDED", arn)))
    assert not matches(pattern, status_change_event(Ended("r1", "FAILED", arn + "-other")))


def test_a_run_whose_execution_has_not_started_is_caught_with_the_runtimes_own_client(
    pipeline: Pipeline,
) -> None:
    """The runtime reads the history with `runtime.sfn`: its exception classes are the ones a
    caller holds (a client of another session raises classes of its own)."""
    with pytest.raises(pipeline.runtime.sfn.exceptions.ExecutionDoesNotExist):
        pipeline.runtime.execution_events("no-such-run")
