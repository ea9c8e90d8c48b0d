"""A run's Step Functions executions: how they are named, and when a run continues in a fresh one.

The first execution of a run is named after the run, so a second start of the same run is
refused by Step Functions. A long run continues in fresh executions (each with its own
25,000-event history): the n-th is `<run_id>--<n>`, n = 2, 3, ... Run ids never contain
`--`, so the run id is everything before the last one.
"""

from toolpipe.shared.agents import (
    EVENTS_PER_RATE_WAIT,
    Agent,
    execution_events_bound,
    get_agent,
    worst_turn_events,
)
from toolpipe.shared.agents.errors import UnknownAgentError
from toolpipe.shared.messages import AssistantMessage, HistoryItem, RunRecord
from toolpipe.shared.runs.deadline_checks import CHECKS_PER_TURN, WORST_CHECK_EVENTS
from toolpipe.shared.settings import ExecutionBudget

SEPARATOR = "--"
# Step Functions execution names: 1-80 characters.
MAX_NAME_LENGTH = 80


def execution_name(run_id: str, n: int = 1) -> str:
    """The name of the `n`-th execution of `run_id` (1 is the first).

    Raises:
        ValueError: `run_id` contains the separator, `n` is below 1, or the name is too long.
    """
    if SEPARATOR in run_id:
        raise ValueError(f"run id {run_id!r} contains {SEPARATOR!r}")
    if n < 1:
        raise ValueError(f"execution number {n} is below 1")
    name = run_id if n == 1 else f"{run_id}{SEPARATOR}{n}"
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"execution name {name!r} is longer than {MAX_NAME_LENGTH} characters")
    return name


def run_id_of(name: str) -> str:
    """The run an execution belongs to, from the execution's name."""
    run_id, separator, number = name.rpartition(SEPARATOR)
    return run_id if separator and number.isdigit() else name


def execution_number(name: str) -> int:
    """Which execution of its run this is (1 for the first)."""
    _, separator, number = name.rpartition(SEPARATOR)
    return int(number) if separator and number.isdigit() else 1


def needs_fresh_execution(
    run: RunRecord, agent: Agent, history: list[HistoryItem], waits: int = 0, *, deadline_checks: int = 0
) -> bool:
    """True when one more worst-case turn (of `agent`, answering next) might not fit in this
    execution's event budget. Every turn this execution ran is counted at its worst (all
    retries, every call failing through its Catch), so the decision holds whatever the history
    really holds; turns of other agents (a handoff) by their own limits; each of the
    execution's `waits` for the model's rate limit (shared/runs/rate_governor.py) by its loop.
    A run whose waits for people do not count: its timer's `deadline_checks` so far, and those
    one more turn may take (shared/runs/deadline_checks.py), each at its worst."""
    replies = [i for i in history if isinstance(i, AssistantMessage) and i.turn > run.execution_start_turn]
    agents = {
        name: agent if name == agent.name else _known(name)
        for name in {i.agent or run.agent for i in replies}
    }
    turn_calls = [_dispatched(agents[i.agent or run.agent], len(i.tool_calls)) for i in replies]
    # Calls that may wait for a person (or a deferred answer) write more events (shared/agents/agent.py).
    gated = agent.waits or any(a is None or a.waits for a in agents.values())
    bound = (
        execution_events_bound(turn_calls, gated)
        + worst_turn_events(agent.max_calls_per_turn, agent.waits)
        + waits * EVENTS_PER_RATE_WAIT
    )
    if run.max_duration_waits == "exclude" and run.deadline is not None:
        bound += (deadline_checks + CHECKS_PER_TURN) * WORST_CHECK_EVENTS
    return bool(turn_calls or waits or deadline_checks) and bound > ExecutionBudget.from_env().event_budget


def _known(name: str) -> Agent | None:
    try:
        return get_agent(name)
    except UnknownAgentError:
        return None  # removed by a deploy: its turns counted at their worst


def _dispatched(agent: Agent | None, calls: int) -> int:
    """The most calls of a reply that were dispatched: past its agent's limit, none were."""
    return calls if agent is None else min(calls, agent.max_calls_per_turn)
