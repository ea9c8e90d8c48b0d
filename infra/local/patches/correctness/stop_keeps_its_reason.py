"""A stop keeps the error and cause it was given.

moto: `StopExecution` reads only the execution's ARN: its `error` and `cause` are dropped, and
the execution's `ExecutionAborted` event says neither.

Why it matters: on AWS the history (and the console, and a timeline read from it) says why an
execution was stopped: a run's cancel says by whom.

The patch: the request's error and cause reach the stop.
"""

import contextvars
from typing import Any

from moto.stepfunctions.parser.backend.execution import Execution
from moto.stepfunctions.responses import StepFunctionResponse

CHECKED_WITH = ("5.2.5",)

# The stop being answered: (error, cause) as the request gave them.
_reason: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("stop_reason", default=None)
_answer_stop = StepFunctionResponse.stop_execution


def _answer_stop_with_its_reason(self: StepFunctionResponse) -> Any:
    token = _reason.set((str(self._get_param("error") or ""), str(self._get_param("cause") or "")))
    try:
        return _answer_stop(self)
    finally:
        _reason.reset(token)


def _with_the_reason(stop: Any) -> Any:
    def stop_with_the_reason(self: Execution, stop_date: Any, error: str | None, cause: str | None) -> None:
        given = _reason.get()
        if given is not None:
            error, cause = given
        stop(self, stop_date=stop_date, error=error, cause=cause)

    return stop_with_the_reason


def install() -> None:
    StepFunctionResponse.stop_execution = _answer_stop_with_its_reason  # type: ignore[method-assign]
    Execution.stop = _with_the_reason(Execution.stop)  # type: ignore[method-assign]
