"""The transitions an execution's history is billed as: each state entered, and each retry."""

from toolpipe.shared.costs.transitions import billed_transitions


def _events(*kinds: str) -> list[dict[str, str]]:
    return [{"type": kind} for kind in kinds]


def test_each_state_entered_is_one_transition() -> None:
    history = _events(
        "ExecutionStarted",
        "TaskStateEntered",
        "LambdaFunctionScheduled",
        "LambdaFunctionStarted",
        "LambdaFunctionSucceeded",
        "TaskStateExited",
        "ChoiceStateEntered",
        "ChoiceStateExited",
        "SucceedStateEntered",
        "ExecutionSucceeded",
    )
    assert billed_transitions(history) == 3


def test_a_retried_task_is_billed_each_attempt() -> None:
    # A Lambda task that failed twice and succeeded on its third attempt, inside one state entry.
    attempt_failed = ("LambdaFunctionScheduled", "LambdaFunctionStarted", "LambdaFunctionFailed")
    history = _events(
        "TaskStateEntered",
        *attempt_failed,
        *attempt_failed,
        "LambdaFunctionScheduled",
        "LambdaFunctionStarted",
        "LambdaFunctionSucceeded",
        "TaskStateExited",
        "MapStateEntered",
        "TaskStateEntered",  # a service integration in the Map's iteration: no retry
        "TaskScheduled",
        "TaskSucceeded",
    )
    assert billed_transitions(history) == 3 + 2
