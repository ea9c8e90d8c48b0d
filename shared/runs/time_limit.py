"""A run's wall-clock limit (`max_duration`): when it passes, and what the run says when it does.

The state machine enforces it, not a Lambda's clock: each execution of the run gets the deadline
in its input, and a timer branch racing the agent loop waits for it in a Wait state
(infra/cdk/definition.py). Time waiting for a person (an approval, a deferred answer) counts:
the limit is how long the caller waits for the run, whoever the run waits for; a wait of its own
is bounded by the tool's `approval_timeout`/`wait_seconds` as well. A resume starts the clock
again from the resume (shared/runs/resume.py).
"""

from datetime import UTC, datetime, timedelta

from toolpipe.shared.agents import Agent
from toolpipe.shared.messages import RunRecord


def run_max_duration(agent: Agent, requested: int | None) -> int | None:
    """The run's limit in seconds: the agent's, or less when the start asked for less."""
    limits = [s for s in (agent.max_duration, requested) if s is not None]
    return min(limits) if limits else None


def deadline_after(seconds: float | None, now: datetime | None = None) -> str | None:
    """When a limit of `seconds` from `now` passes, as Step Functions reads a `TimestampPath`
    (RFC 3339 with an uppercase T and Z); None for no limit."""
    if seconds is None:
        return None
    at = (now or datetime.now(UTC)) + timedelta(seconds=seconds)
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def earliest(*deadlines: str | None) -> str | None:
    """The first of the deadlines that are set (a child run ends by its parent's deadline too)."""
    return min((d for d in deadlines if d is not None), key=datetime.fromisoformat, default=None)


def out_of_time_reason(run: RunRecord) -> str:
    """The run's error when its deadline passed."""
    return f"the run passed its max_duration of {_seconds(run.max_duration)} s (waits for people included)"


def not_completed_reason(run: RunRecord) -> str:
    """Why a call in flight when the deadline passed has no result."""
    return f"the run passed its max_duration of {_seconds(run.max_duration)} s"


def _seconds(value: int | None) -> str:
    return "?" if value is None else str(value)
