"""Execution names: a run's first execution is the run id, each continuation `<run_id>--<n>`."""

import uuid

import pytest

from toolpipe.shared.agents import EVENTS_PER_RATE_WAIT, Agent, execution_events_bound, worst_turn_events
from toolpipe.shared.messages import AssistantMessage, RunRecord, UserMessage
from toolpipe.shared.runs.deadline_checks import CHECKS_PER_TURN, WORST_CHECK_EVENTS
from toolpipe.shared.runs.executions import execution_name, needs_fresh_execution, run_id_of


def test_the_first_execution_is_named_after_the_run() -> None:
    assert execution_name("abc") == "abc"
    assert run_id_of("abc") == "abc"


def test_continuations_name_the_run_and_their_number() -> None:
    run_id = uuid.uuid4().hex
    assert [execution_name(run_id, n) for n in (2, 3, 12)] == [
        f"{run_id}--2",
        f"{run_id}--3",
        f"{run_id}--12",
    ]
    assert {run_id_of(execution_name(run_id, n)) for n in range(1, 20)} == {run_id}


def test_single_dashes_in_a_run_id_are_kept() -> None:
    assert run_id_of(execution_name("a-b-c", 4)) == "a-b-c"


def test_names_that_could_not_be_read_back_are_refused() -> None:
    with pytest.raises(ValueError, match="contains '--'"):
        execution_name("a--b", 2)
    with pytest.raises(ValueError, match="below 1"):
        execution_name("a", 0)
    with pytest.raises(ValueError, match="longer than 80"):
        execution_name("x" * 79, 2)


def test_waits_for_the_models_rate_limit_count_in_the_event_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = Agent(name="a", instructions="x")
    run = RunRecord(run_id="r", agent="a", status="running", created_at="2026-01-01T00:00:00Z", turn=1)
    history = [UserMessage(seq=1, turn=0, content="hi"), AssistantMessage(seq=2, turn=1, content=None)]
    # A budget that one more turn and 5 waits just fit: a sixth wait in this execution does not.
    fits = execution_events_bound([0]) + worst_turn_events(agent.max_calls_per_turn)
    monkeypatch.setenv("TOOLPIPE_EXECUTION_EVENT_BUDGET", str(fits + 5 * EVENTS_PER_RATE_WAIT))
    assert not needs_fresh_execution(run, agent, history, waits=5)
    assert needs_fresh_execution(run, agent, history, waits=6)
    # Waits before the first reply count as well: a run that only waits continues in time too.
    monkeypatch.setenv("TOOLPIPE_EXECUTION_EVENT_BUDGET", "100")
    assert needs_fresh_execution(run, agent, history[:1], waits=20)


def test_the_timers_checks_of_a_run_whose_waits_do_not_count_are_in_the_event_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = Agent(name="a", instructions="x")
    run = RunRecord(
        run_id="r",
        agent="a",
        status="running",
        turn=1,
        max_duration=60,
        deadline="2026-01-01T00:01:00.000Z",
        max_duration_waits="exclude",
    )
    history = [UserMessage(seq=1, turn=0, content="hi"), AssistantMessage(seq=2, turn=1, content=None)]
    # One more turn fits, with the checks it may take and 10 made so far; an eleventh does not.
    fits = (
        execution_events_bound([0])
        + worst_turn_events(agent.max_calls_per_turn)
        + (CHECKS_PER_TURN + 10) * WORST_CHECK_EVENTS
    )
    monkeypatch.setenv("TOOLPIPE_EXECUTION_EVENT_BUDGET", str(fits))
    assert not needs_fresh_execution(run, agent, history, deadline_checks=10)
    assert needs_fresh_execution(run, agent, history, deadline_checks=11)
    # Waits that count: the timer only waits for the deadline, and checks nothing.
    counted = run.model_copy(update={"max_duration_waits": "count"})
    assert not needs_fresh_execution(counted, agent, history, deadline_checks=11)
