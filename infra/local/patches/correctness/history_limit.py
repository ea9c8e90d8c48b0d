"""An execution whose history reaches 25,000 events fails, as on AWS.

moto: an execution writes history events without end (measured: a loop of Pass and Choice
states ran to 28,006 events and SUCCEEDED).

Why it matters: Step Functions fails an execution whose history reaches 25,000 events
(https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html, "Maximum execution
history size"). A run goes on in a fresh execution before its budget of events is spent
(`shared/agents/agent.py`, `TOOLPIPE_EXECUTION_EVENT_BUDGET`); if that count were wrong, a
local run would still finish where the deployed one fails.

The patch: a state is not entered once the execution's history holds `HISTORY_EVENT_LIMIT`
events; the execution fails with `States.Runtime`, which a Catch of the execution's own states
does not keep going (a Map's iteration that meets it fails, and the next state fails the
execution). AWS documents that the execution fails, not the error it names: `States.Runtime`
is moto's name for an execution's own failures.
"""

from typing import Any

from moto.stepfunctions.parser.api import ExecutionFailedEventDetails, HistoryEventType
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.component.state.state import CommonStateField
from moto.stepfunctions.parser.asl.eval.environment import Environment

CHECKED_WITH = ("5.2.5",)

# Step Functions' quota on one execution's history (tests lower it).
HISTORY_EVENT_LIMIT = 25_000

_enter_state = CommonStateField._eval_body


def _enter_state_within_the_history_limit(self: CommonStateField, env: Environment) -> None:
    if _history_length(env) >= HISTORY_EVENT_LIMIT:
        error = StatesErrorNameType.StatesRuntime
        cause = f"The execution reached the maximum number of history events ({HISTORY_EVENT_LIMIT})."
        # Typed loosely: moto's TypedDict lists every kind of details as required.
        details: Any = {
            "executionFailedEventDetails": ExecutionFailedEventDetails(error=error.to_name(), cause=cause)
        }
        raise FailureEventException(
            failure_event=FailureEvent(
                env=env,
                error_name=StatesErrorName(typ=error),
                event_type=HistoryEventType.ExecutionFailed,
                event_details=details,
            )
        )
    _enter_state(self, env)


def _history_length(env: Environment) -> int:
    # The list itself: `get_event_history()` copies every event.
    return len(env.event_manager._history_event_list)


def install() -> None:
    CommonStateField._eval_body = _enter_state_within_the_history_limit  # type: ignore[method-assign]
