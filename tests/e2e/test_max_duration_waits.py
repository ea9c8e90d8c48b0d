"""A wall-clock limit that does not count waits for people (`max_duration_waits: "exclude"`):
the state machine's timer asks for the run's active time at the deadline and waits again while
some is left; a run kept busy still ends `limit`; "count" stays the default and wins."""

import dataclasses
import time
from typing import Any

import pytest

from tests.conftest import Pipeline, call
from tests.e2e.test_approvals import GATED, pending
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS
from toolpipe.shared.runs.deadline_checks import EVENTS_PER_CHECK

# The gated agent, its waits for people not counted.
PATIENT = dataclasses.replace(GATED, name="patient", max_duration_waits="exclude")
NOT_COUNTED = "(waits for people not counted)"


@pytest.fixture(autouse=True)
def patient_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS, PATIENT.name, PATIENT)
    monkeypatch.setitem(AGENTS, GATED.name, GATED)


@pytest.fixture
def warm(pipeline: Pipeline) -> Pipeline:
    """The pipeline once a run went through it: a runtime's first model step (its functions'
    cold starts, seconds on a busy machine) is active time too, more than these runs' limits."""
    pipeline.script(Reply(content="ready"))
    assert pipeline.finish(pipeline.start("warm up"))["run"]["status"] == "succeeded"
    pipeline.model.requests.clear()
    return pipeline


def _approve(pipeline: Pipeline, at: float) -> float:
    """Approve the pending call at `at` (monotonic) or as soon as it waits; when it was approved."""
    approval = pending(pipeline)
    time.sleep(max(0.0, at - time.monotonic()))
    status, body = pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    assert status == 200, body
    return time.monotonic()


def _checks(pipeline: Pipeline, run_id: str) -> list[dict[str, Any]]:
    """The timer's checks of the run's active time: where its CheckActiveTime task began."""
    events = pipeline.runtime.execution_events(run_id)
    entered = [e for e in events if e.get("stateEnteredEventDetails", {}).get("name") == "CheckActiveTime"]
    return entered


def test_a_run_whose_approval_waits_past_its_max_duration_succeeds_once_approved(warm: Pipeline) -> None:
    pipeline = warm
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=5)]), Reply(content="Sent."))
    began = time.monotonic()
    run_id = pipeline.start("pay ana", agent="gated", max_duration=3, max_duration_waits="exclude")
    # Waiting past the 3 s: the timer's check at the deadline finds the clock stopped.
    _approve(pipeline, at=began + 4)
    run = pipeline.finish(run_id)

    assert run["run"]["status"] == "succeeded", run["run"]["error"]
    assert run["run"]["output"] == "Sent."
    assert run["run"]["max_duration_waits"] == "exclude"
    assert len(_checks(pipeline, run_id)) == 1


def test_a_run_kept_busy_past_its_active_time_ends_limit_its_wait_not_counted(warm: Pipeline) -> None:
    pipeline = warm
    pipeline.script(
        Reply(tool_calls=[call("wire_money", to="ana", amount=5)]),
        Reply(tool_calls=[call("slow", seconds=10)]),
        Reply(content="never asked"),
    )
    began = time.monotonic()
    run_id = pipeline.start("pay, then take your time", agent="patient", max_duration=3)
    approved = _approve(pipeline, at=began + 1.5)
    waited = approved - began
    run = pipeline.finish(run_id)
    took = time.monotonic() - began

    assert run["run"]["status"] == "limit"
    assert run["run"]["error"] == f"the run passed its max_duration of 3 s {NOT_COUNTED}"
    slow = [m for m in run["messages"] if m["kind"] == "tool_result"][-1]
    assert (
        slow["content"] == "Error: the tool call did not complete (the run passed its max_duration of 3 s)."
    )
    # Not at the deadline (3 s): the wait moved it on; not after the tool's 10 s either. The
    # timer checked at the deadline, found time left and checked again when it would pass.
    assert 3 + waited - 1 < took < 9, (took, waited)
    assert len(_checks(pipeline, run_id)) == 2
    assert len(pipeline.model.requests) == 2


def test_count_wins_when_the_start_asks_for_it_and_the_wait_counts(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=5)]), Reply(content="never asked"))
    began = time.monotonic()
    run_id = pipeline.start("pay ana", agent="patient", max_duration=2, max_duration_waits="count")
    pending(pipeline)  # never decided
    run = pipeline.finish(run_id)

    assert run["run"]["status"] == "limit"
    assert run["run"]["max_duration_waits"] == "count"
    assert run["run"]["error"] == "the run passed its max_duration of 2 s (waits for people included)"
    assert time.monotonic() - began < 6
    assert _checks(pipeline, run_id) == []


def test_the_next_model_step_ends_a_run_whose_tool_ran_on_after_the_wait(warm: Pipeline) -> None:
    pipeline = warm
    # One turn: a call that waits for a person and a slow one. While the person decides the clock
    # stands still (the timer's check at the deadline then looks again only minutes later); the
    # slow call running on after the approval is active time, past the 2 s: the model step that
    # follows the turn ends the run, the model not asked again.
    pipeline.script(
        Reply(tool_calls=[call("wire_money", to="ana", amount=5), call("slow", seconds=5)]),
        Reply(content="never asked"),
    )
    began = time.monotonic()
    run_id = pipeline.start("pay and wait", agent="patient", max_duration=2)
    _approve(pipeline, at=began + 3)
    run = pipeline.finish(run_id)

    assert run["run"]["status"] == "limit"
    assert run["run"]["error"] == f"the run passed its max_duration of 2 s {NOT_COUNTED}"
    assert len(pipeline.model.requests) == 1
    assert time.monotonic() - began < 9
    events = pipeline.runtime.execution_events(run_id)
    # Ended by the model step (the loop's way out), not by the timer's OutOfTime.
    assert not [e for e in events if e.get("stateEnteredEventDetails", {}).get("name") == "OutOfTime"]
    [check] = _checks(pipeline, run_id)
    # The check's events: its task's five, its Choice's two, and the Wait it entered (the run's
    # end aborted it before it exited, the ninth).
    first = events.index(check)
    assert [e["type"] for e in events[first : first + EVENTS_PER_CHECK - 1]] == [
        "TaskStateEntered",
        "TaskScheduled",
        "TaskStarted",
        "TaskSucceeded",
        "TaskStateExited",
        "ChoiceStateEntered",
        "ChoiceStateExited",
        "WaitStateEntered",
    ]
