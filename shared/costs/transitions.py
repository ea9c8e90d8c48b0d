"""Step Functions state transitions, measured: an ended execution's history counts every state
it entered (what Standard workflows bill), and the run's counters take them once per execution.

Read when the execution has ended (the state machine's status-change rule reaches the
orchestrator for every ending, `ExecutionEndedRequest`), from its history, page by page: an
execution keeps at most 25,000 events.
"""

from typing import Any, Protocol


class ExecutionCounter(Protocol):
    def count_execution(self, run_id: str, execution: str, transitions: int) -> bool: ...


# Every `*StateEntered` event is one billed transition (Task, Choice, Map, Pass, Wait, Parallel,
# Succeed, Fail...); a Map's iterations enter their states each time.
_ENTERED = "StateEntered"
PAGE_SIZE = 1000


def state_transitions(sfn: Any, execution_arn: str) -> int:
    """How many states the execution entered, from its whole history."""
    kwargs: dict[str, Any] = {
        "executionArn": execution_arn,
        "maxResults": PAGE_SIZE,
        "includeExecutionData": False,
    }
    entered = 0
    while True:
        page = sfn.get_execution_history(**kwargs)
        entered += sum(1 for event in page.get("events", []) if str(event.get("type", "")).endswith(_ENTERED))
        if not page.get("nextToken"):
            return entered
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
