"""The model's rate governor through the local runtime: a run waits for the endpoint's rate limit
in the state machine's Wait state, with no Lambda running, and the runs of one endpoint and model
share one budget (shared/runs/rate_governor.py)."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Pipeline, _pipeline
from toolpipe.infra.local.scripted_model import EndpointRateLimit, HttpError, Reply
from toolpipe.shared.agents.agent import EVENTS_PER_RATE_WAIT, EVENTS_PER_RUN

# Fast: a slot a second, so a wait is the Wait state's shortest.
GOVERNED = {"TOOLPIPE_MODEL_RATE_PER_MINUTE": "60", "TOOLPIPE_MODEL_RATE_BURST": "1"}


def _too_many(retry_after: int) -> HttpError:
    return HttpError(
        429,
        {"error": {"message": "Rate limit reached for requests", "type": "requests"}},
        {"retry-after": str(retry_after)},
    )


@pytest.fixture
def governed() -> Iterator[Pipeline]:
    yield from _pipeline(GOVERNED)


def _states(events: list[dict[str, Any]], kind: str) -> list[str]:
    return [e["stateEnteredEventDetails"]["name"] for e in events if e["type"] == f"{kind}Entered"]


def test_a_429_makes_the_run_wait_in_the_state_machine_not_in_the_lambda(governed: Pipeline) -> None:
    governed.script(_too_many(2), Reply(content="done"))
    run_id = governed.start("hello")
    run = governed.finish(run_id)

    assert run["run"]["status"] == "succeeded" and run["run"]["output"] == "done"
    events = governed.runtime.execution_events(run_id)
    # The wait is a Wait state, then the model step again; the endpoint was asked twice.
    assert _states(events, "WaitState") == ["WaitForModel"]
    assert len(governed.model.requests) == 2
    waited = next(e for e in events if e["type"] == "WaitStateEntered")
    left = next(e for e in events if e["type"] == "WaitStateExited")
    assert (left["timestamp"] - waited["timestamp"]).total_seconds() >= 1.9
    # The model step that got the 429 returned at once: it did not sleep through the Retry-After.
    (refused_at,) = [at for status, at in governed.model.answered if status == 429]
    first_step_ended = next(e for e in events if e["type"] == "TaskSucceeded")["timestamp"].timestamp()
    assert first_step_ended - refused_at < 1.0
    # What the wait adds to the execution's history, as the event budget counts it.
    assert len(events) == EVENTS_PER_RUN + EVENTS_PER_RATE_WAIT


def test_two_runs_share_the_budget_and_the_endpoint_never_refuses_them(governed: Pipeline) -> None:
    governed.model.rate_limit = EndpointRateLimit(per_minute=60, burst=1)
    governed.script(Reply(content="one"), Reply(content="two"))
    first, second = governed.start("a"), governed.start("b")
    runs = [governed.finish(first), governed.finish(second)]

    assert [r["run"]["status"] for r in runs] == ["succeeded", "succeeded"]
    assert governed.model.rate_limited == 0
    arrivals = governed.model.arrivals
    assert len(arrivals) == 2 and arrivals[1] - arrivals[0] >= 0.9
    # One of them took the budget's slot, the other waited its turn in a Wait state.
    waits = [_states(governed.runtime.execution_events(r), "WaitState") for r in (first, second)]
    assert sorted(waits) == [[], ["WaitForModel"]]


def test_a_wait_past_the_runs_max_duration_ends_it_limit_with_the_reason(governed: Pipeline) -> None:
    governed.script(_too_many(30), Reply(content="never asked"))
    run_id = governed.start("hello", max_duration=20)
    run = governed.finish(run_id, timeout=15)

    assert run["run"]["status"] == "limit"
    assert run["run"]["error"].startswith(
        "the model's rate limit would make the run wait 30 s, past its max_duration of 20 s"
    )
    assert "429" in run["run"]["error"] and "\n" not in run["run"]["error"]
    # Ended at once, not after a wait that could not end in time (the timer's wait is its own).
    assert "WaitForModel" not in _states(governed.runtime.execution_events(run_id), "WaitState")
    assert len(governed.model.requests) == 1
