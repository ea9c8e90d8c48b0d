"""Step Functions state transitions, measured: an ended execution's history counts every state
it entered and every retry (what Standard workflows bill), and the run's counters take them once per execution.

Read when the execution has ended (the state machine's status-change rule reaches the
orchestrator for every ending, `ExecutionEndedRequest`), from its history, page by page: an
execution keeps at most 25,000 events.
"""

from collections.abc import Iterable
from typing import Any, Protocol


class ExecutionCounter(Protocol):
    def count_execution(self, run_id: str, execution: str, transitions: int) -> bool: ...


# Every `*StateEntered` event is one billed transition (Task, Choice, Map, Pass, Wait, Parallel,
# Succeed, Fail...); a Map's iterations enter their states each time. A Task state's `Retry`
# attempts are billed as transitions too ("including retries": the Step Functions pricing page)
# but enter no state again: each attempt schedules its task once more.
_ENTERED = "StateEntered"
_TASK_ENTERED = "TaskStateEntered"
_SCHEDULED = ("TaskScheduled", "LambdaFunctionScheduled", "ActivityScheduled")
PAGE_SIZE = 1000


def billed_transitions(events: Iterable[dict[str, Any]]) -> int:
    """The transitions a history's events are billed as: each state entered, and each retry of
    a Task state (its schedulings past one per entry). A Task state that failed before it
    scheduled anything makes this a lower bound by one retry."""
    entered = tasks = scheduled = 0
    for event in events:
        kind = str(event.get("type", ""))
        if kind.endswith(_ENTERED):
            entered += 1
            tasks += kind == _TASK_ENTERED
        elif kind in _SCHEDULED:
            scheduled += 1
    return entered + max(0, scheduled - tasks)


def state_transitions(sfn: Any, execution_arn: str) -> int:
    """The transitions the execution is billed, from its whole history."""
    kwargs: dict[str, Any] = {
        "executionArn": execution_arn,
        "maxResults": PAGE_SIZE,
        "includeExecutionData": False,
    }
    events: list[dict[str, Any]] = []
    while True:
        page = sfn.get_execution_history(**kwargs)
        events.extend({"type": event.get("type")} for event in page.get("events", []))
        if not page.get("nextToken"):
            return billed_transitions(events)
        kwargs["nextToken"] = page["nextToken"]


class TransitionCounter:
    """Counts an ended execution's transitions into its run, once."""

    def __init__(self, sfn: Any, store: ExecutionCounter) -> None:
        self._sfn = sfn
        self._store = store

    def count(self, run_id: str, execution: str, execution_arn: str) -> int | None:
        """The transitions added, or None when the execution was counted already (or its run is gone)."""
        transitions = state_transitions(self._sfn, execution_arn)
        return transitions if self._store.count_execution(run_id, execution, transitions) else None
