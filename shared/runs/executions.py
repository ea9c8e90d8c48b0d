"""A run's executions: named after the run, and renewed before one nears Step Functions'
limit of 25,000 history events."""

import os

from shared.agents import Agent
from shared.messages import AssistantMessage, HistoryItem, RunRecord

HISTORY_EVENT_LIMIT = 25_000
# Measured on the state machine as built (tests/e2e/test_limits.py measures them again).
EVENTS_PER_RUN = 13
EVENTS_PER_TURN = 11
EVENTS_PER_CALL = 8
# What retries and timeouts can add at worst: the model step retried (6 Lambda-service + 2
# model-endpoint retries, 5 events each) and each call failing through its Catch (3 events).
EVENTS_PER_TURN_RETRIES = 8 * 5
EVENTS_PER_CALL_FAILURE = 3
# Below the limit, so the step that decides to continue always fits.
DEFAULT_EVENT_BUDGET = 20_000


def execution_name(run_id: str, execution: int) -> str:
    """The first execution is named after the run; the ones it continues in get a suffix."""
    return run_id if execution == 1 else f"{run_id}--{execution}"


def run_id_of(execution_name: str) -> str:
    return execution_name.rsplit("--", 1)[0]


def execution_number(execution_name: str) -> int:
    _, _, suffix = execution_name.rpartition("--")
    return int(suffix) if "--" in execution_name and suffix.isdigit() else 1


def event_budget() -> int:
    return int(os.environ.get("TOOLPIPE_EXECUTION_EVENT_BUDGET", DEFAULT_EVENT_BUDGET))


def worst_turn_events(calls: int) -> int:
    return EVENTS_PER_TURN + EVENTS_PER_TURN_RETRIES + calls * (EVENTS_PER_CALL + EVENTS_PER_CALL_FAILURE)


def execution_events_bound(turn_calls: list[int]) -> int:
    """An upper bound of the events an execution wrote, given the calls of each turn it ran."""
    return EVENTS_PER_RUN + sum(worst_turn_events(calls) for calls in turn_calls)


def needs_fresh_execution(run: RunRecord, agent: Agent, history: list[HistoryItem]) -> bool:
    """True when another worst-case turn might not fit in this execution's budget."""
    turn_calls = [
        min(len(i.tool_calls), agent.max_calls_per_turn)
        for i in history
        if isinstance(i, AssistantMessage) and i.turn > run.execution_start_turn
    ]
    bound = execution_events_bound(turn_calls) + worst_turn_events(agent.max_calls_per_turn)
    return bool(turn_calls) and bound > event_budget()
