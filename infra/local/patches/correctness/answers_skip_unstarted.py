"""A task's answer passes over executions that have no interpreter state yet.

moto: `SendTaskSuccess`, `SendTaskFailure` and `SendTaskHeartbeat` look for the token in every
running execution, reading each one's interpreter state: one that had just started (no state
yet) made any of them raise and answer 500.

Why it matters: a worker's answer or a person's approval failed whenever another run had just
started. Such an execution holds no token yet.

The patch: moto's loop over executions, passing over those without state.
"""

from typing import Any

from moto.stepfunctions.parser.api import (
    ExecutionStatus,
    InvalidToken,
    SendTaskFailureOutput,
    TaskDoesNotExist,
    TaskTimedOut,
)
from moto.stepfunctions.parser.asl.eval.callback.callback import (
    CallbackConsumerTimeout,
    CallbackNotifyConsumerError,
    CallbackOutcomeFailure,
    CallbackOutcomeSuccess,
)
from moto.stepfunctions.parser.models import StepFunctionsParserBackend

CHECKED_WITH = ("5.2.5",)


def _callbacks(execution: Any) -> Any:
    """The execution's callback pool, or None while its interpreter state is not built yet."""
    worker = execution.exec_worker
    environment = getattr(worker, "env", None) if worker is not None else None
    return None if environment is None else environment.callback_pool_manager


def _answer_task(executions: Any, answer: Any) -> bool:
    """moto's loop over executions for a task token, passing over those without state yet."""
    for execution in executions:
        pool = _callbacks(execution)
        if pool is None:
            continue
        try:
            if answer(pool):
                return True
        except CallbackNotifyConsumerError as error:
            # As moto raises them: their message is optional at run time, not in their stubs.
            if isinstance(error, CallbackConsumerTimeout):
                raise TaskTimedOut() from None  # type: ignore[call-arg]
            raise TaskDoesNotExist() from None  # type: ignore[call-arg]
    raise InvalidToken()  # type: ignore[no-untyped-call]


def _send_task_heartbeat(self: StepFunctionsParserBackend, task_token: str) -> None:
    running = self._get_executions(ExecutionStatus.RUNNING)
    _answer_task(running, lambda pool: pool.heartbeat(callback_id=task_token))


def _send_task_success(self: StepFunctionsParserBackend, task_token: str, outcome: str) -> None:
    success = CallbackOutcomeSuccess(callback_id=task_token, output=outcome)
    running = self._get_executions(ExecutionStatus.RUNNING)
    _answer_task(running, lambda pool: pool.notify(callback_id=task_token, outcome=success))


def _send_task_failure(
    self: StepFunctionsParserBackend, task_token: str, error: Any = None, cause: Any = None
) -> SendTaskFailureOutput:
    failure = CallbackOutcomeFailure(callback_id=task_token, error=error, cause=cause)
    # Every execution, not only running ones: as moto's own (a failure may close any task).
    _answer_task(self._get_executions(), lambda pool: pool.notify(callback_id=task_token, outcome=failure))
    return SendTaskFailureOutput()


def install() -> None:
    StepFunctionsParserBackend.send_task_heartbeat = _send_task_heartbeat  # type: ignore[method-assign, assignment]
    StepFunctionsParserBackend.send_task_success = _send_task_success  # type: ignore[method-assign, assignment]
    StepFunctionsParserBackend.send_task_failure = _send_task_failure  # type: ignore[method-assign]
