"""A run's wall-clock limit (`max_duration`): when it passes, and what the run says when it does.

The state machine enforces it, not a Lambda's clock: each execution of the run gets the deadline
in its input, and a timer branch racing the agent loop waits for it in a Wait state
(infra/cdk/definition.py). A resume starts the clock again from the resume
(shared/runs/resume.py).

Whether time waiting for a person or a program (an approval, a question, a client-executed
call's result) counts is the run's `max_duration_waits`. "count", the default: the limit is how
long the caller waits for the run, whoever the run waits for (as Temporal's workflow execution
timeout is), and a wait of its own is bounded by the tool's `approval_timeout`/`wait_seconds` as
well. "exclude": only the run's active time counts; at the deadline the timer asks for it, from
the recorded waits, and waits again while some is left (shared/runs/active_time.py).
"""

from datetime import UTC, datetime, timedelta

from toolpipe.shared.agents import Agent
from toolpipe.shared.messages import MaxDurationWaits, RunRecord


def run_max_duration(agent: Agent, requested: int | None) -> int | None:
    """The run's limit in seconds: the agent's, or less when the start asked for less."""
    limits = [s for s in (agent.max_duration, requested) if s is not None]
    return min(limits) if limits else None


def run_max_duration_waits(agent: Agent, requested: MaxDurationWaits | None) -> MaxDurationWaits:
    """Whether the run's waits count: "count" when the agent or the start asks it (the stricter
    wins, as the smaller `max_duration` does), "exclude" when either asks that, else "count"."""
    asked = {agent.max_duration_waits, requested}
    return "exclude" if "exclude" in asked and "count" not in asked else "count"


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
    waits = "not counted" if run.max_duration_waits == "exclude" else "included"
    return f"the run passed its max_duration of {_seconds(run.max_duration)} s (waits for people {waits})"


def not_completed_reason(run: RunRecord) -> str:
    """Why a call in flight when the deadline passed has no result."""
    return f"the run passed its max_duration of {_seconds(run.max_duration)} s"


def _seconds(value: int | None) -> str:
    return "?" if value is None else str(value)
