"""How often the timer of a run whose waits for people do not count checks its active time, and
what its checks cost in the execution's history (shared/runs/active_time.py decides each check).

While a wait goes on, the run's active time stands still: the timer looks again only every
`FLOOR_SECONDS`, or a quarter of the wait so far when that is longer, so a day's wait costs 25
checks and a month's 40 (the longest a call may wait), not hundreds.
"""

from toolpipe.shared.agents.agent import EVENTS_PER_STEP_RETRY

# While a wait goes on: the least time between two checks, and the part of the wait so far the
# next check waits for when that is longer.
FLOOR_SECONDS = 300
WAIT_FRACTION = 0.25
# A Wait state waits whole seconds: the least time to the next check.
MIN_SECONDS = 1
# The longest a call may wait (shared/settings.py bounds `approval_timeout_seconds` so).
LONGEST_WAIT_SECONDS = 2_592_000

# One check, measured on the state machine as built (tests/e2e/test_max_duration_waits.py): the
# Lambda task (entered, scheduled, started, succeeded, exited), the Choice and the Wait that
# follows (entered and exited each).
EVENTS_PER_CHECK = 9
# Its task's retrier (transient Lambda errors, infra/cdk/definition.py), at most.
CHECK_RETRIES = 6
WORST_CHECK_EVENTS = EVENTS_PER_CHECK + CHECK_RETRIES * EVENTS_PER_STEP_RETRY


def checks_during_wait(seconds: float) -> int:
    """The most checks the timer makes while one wait of `seconds` goes on."""
    checks, waited = 1, 0.0
    while waited < seconds:
        waited += max(FLOOR_SECONDS, waited * WAIT_FRACTION)
        checks += 1
    return checks


# One turn: its calls' waits start together (the gated Map starts every branch at once), so they
# make one stretch of waiting, checked as above; before and after it, a check that finds time
# left and one that finds it passed.
CHECKS_PER_TURN = checks_during_wait(LONGEST_WAIT_SECONDS) + 2
