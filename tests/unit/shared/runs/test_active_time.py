"""A run's active time from its recorded waits (`max_duration_waits="exclude"`), and when the
state machine's timer looks again."""

from datetime import UTC, datetime, timedelta

from toolpipe.infra.cdk.definition import build_definition
from toolpipe.shared.runs.active_time import Wait, clock, next_check
from toolpipe.shared.runs.deadline_checks import CHECK_RETRIES, FLOOR_SECONDS, checks_during_wait

START = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def test_overlapping_waits_count_once_and_a_wait_before_the_start_not_at_all() -> None:
    waits = [
        Wait(_at(-50), _at(5)),  # began before the clock did (a resume): only 0-5 is after it
        Wait(_at(10), _at(20)),
        Wait(_at(15), _at(30)),  # two calls of a turn: 10-30 waited, once
    ]
    state = clock(START, 60, _at(40), waits)
    assert state.active == 40 - 5 - 20
    assert state.left == 60 - 15
    assert state.waiting_since is None


def test_an_ongoing_wait_stops_the_clock_until_now() -> None:
    # Undecided: it ends when it expires, an hour on.
    state = clock(START, 60, _at(100), [Wait(_at(30), _at(3600))])
    assert (state.active, state.left, state.waiting_since) == (30, 30, _at(30))


def test_the_next_check_is_when_the_limit_would_pass_or_later_while_a_wait_goes_on() -> None:
    # 20 s active (20 of the 40 waited), 40 left.
    assert next_check(clock(START, 60, _at(40), [Wait(_at(10), _at(30))]), _at(40)) == _at(40 + 40)
    # Waiting: at least the floor, then a quarter of the wait so far.
    waiting = clock(START, 60, _at(40), [Wait(_at(30), _at(99_999))])
    assert next_check(waiting, _at(40)) == _at(40 + FLOOR_SECONDS)
    long_wait = clock(START, 60, _at(30 + 4000), [Wait(_at(30), _at(99_999))])
    assert next_check(long_wait, _at(30 + 4000)) == _at(30 + 4000 + 1000)
    # Under a second left: a Wait state waits whole seconds.
    assert next_check(clock(START, 60, _at(59.5), []), _at(59.5)) == _at(60.5)


def test_a_days_wait_costs_25_checks_and_a_months_40() -> None:
    assert checks_during_wait(86_400) == 25
    assert checks_during_wait(2_592_000) == 40


def test_the_checks_retries_are_the_definitions() -> None:
    timer = build_definition()["States"]["RunWithin"]["Branches"][1]["States"]
    assert sum(r["MaxAttempts"] for r in timer["CheckActiveTime"]["Retry"]) == CHECK_RETRIES
