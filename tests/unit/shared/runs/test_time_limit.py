"""A run's wall-clock limit: which limit a run gets, and its deadline as Step Functions reads it."""

from datetime import UTC, datetime

import pytest

from toolpipe.shared.agents import Agent
from toolpipe.shared.errors import DefinitionError
from toolpipe.shared.runs.time_limit import deadline_after, earliest, run_max_duration, run_max_duration_waits


def test_a_start_may_ask_for_less_than_the_agent_never_more() -> None:
    agent = Agent(name="a", instructions="x", max_duration=60)
    assert run_max_duration(agent, None) == 60
    assert run_max_duration(agent, 30) == 30
    assert run_max_duration(agent, 600) == 60
    assert run_max_duration(Agent(name="b", instructions="x"), 600) == 600
    assert run_max_duration(Agent(name="b", instructions="x"), None) is None


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "60"])
def test_an_agents_max_duration_is_whole_seconds(bad: object) -> None:
    with pytest.raises(DefinitionError, match="max_duration is a whole number of seconds"):
        Agent(name="a", instructions="x", max_duration=bad)  # type: ignore[arg-type]


def test_the_deadline_is_rfc_3339_with_an_uppercase_t_and_z() -> None:
    now = datetime(2026, 11, 29, 3, 59, 58, 500_000, tzinfo=UTC)
    assert deadline_after(90, now) == "2026-11-29T04:01:28.500Z"
    assert deadline_after(None, now) is None


def test_a_child_ends_by_the_first_deadline() -> None:
    assert earliest("2026-11-29T04:00:00.000Z", "2026-11-29T03:00:00.000Z") == "2026-11-29T03:00:00.000Z"
    assert earliest(None, "2026-11-29T03:00:00.000Z") == "2026-11-29T03:00:00.000Z"
    assert earliest(None, None) is None


def test_waits_for_people_count_unless_asked_otherwise_and_count_wins() -> None:
    plain = Agent(name="a", instructions="x")
    patient = Agent(name="p", instructions="x", max_duration_waits="exclude")
    strict = Agent(name="s", instructions="x", max_duration_waits="count")
    assert run_max_duration_waits(plain, None) == "count"
    assert run_max_duration_waits(plain, "exclude") == "exclude"
    assert run_max_duration_waits(patient, None) == "exclude"
    assert run_max_duration_waits(patient, "count") == "count"
    assert run_max_duration_waits(strict, "exclude") == "count"


def test_an_agents_max_duration_waits_is_count_or_exclude() -> None:
    with pytest.raises(DefinitionError, match='max_duration_waits is "count", "exclude" or None'):
        Agent(name="a", instructions="x", max_duration_waits="skip")  # type: ignore[arg-type]
