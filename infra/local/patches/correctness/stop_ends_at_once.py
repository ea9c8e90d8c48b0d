"""A stopped or timed-out execution ends at once, whatever its running state is doing.

moto: the program's states run on a thread of their own, which the execution's thread joins.
A `StopExecution` only marks the program stopped: the execution went on showing RUNNING, and
ended (status, `ExecutionAborted`, the status-change event) only when the state running then
returned, a Lambda task as long as its function ran (an orchestrator step waiting on its
model, minutes). A timeout ended the execution on time, but its `ExecutionTimedOut` event, and
the events of the state still running, were added after the ending.

Why it matters: on AWS the stop is the ending. `StopExecution` answers once the execution is
`ABORTED`; its ending event goes out then, while the stopped Lambda task still runs and writes:
a run cancelled while its model answers gets its ending handled before the step's last writes.
Locally that order never happened, so code that must handle it was never run.

The patch: the execution's thread wakes when the program stops or times out, records the
ending event then (nothing after it: a task that was running is not recorded as ending), and
ends the execution; `StopExecution` answers once the execution shows it.
"""

import threading
import time
from typing import Any

from moto.stepfunctions.parser.api import ExecutionStatus, HistoryEventType
from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
from moto.stepfunctions.parser.asl.component.program.program import Program
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped, ProgramTimedOut
from moto.stepfunctions.parser.backend.execution import Execution
from moto.stepfunctions.parser.utils import TMP_THREADS

CHECKED_WITH = ("5.2.5",)

# How long `StopExecution` waits for the execution to show its ending (its thread is woken at
# once; a busy machine may take a moment to run it).
STOP_ANSWER_SECONDS = 5.0
_CLOSED = "_toolpipe_closed"
_WAKE = "_toolpipe_wake"
# Held while an event is added or the history closed: nothing is added after the ending.
_events = threading.RLock()
# The events that end an execution: after one, its history is closed, whoever recorded it (the
# states' thread, when the stop or the end came between states or during a wait).
_ENDINGS = frozenset(
    {
        HistoryEventType.ExecutionSucceeded,
        HistoryEventType.ExecutionFailed,
        HistoryEventType.ExecutionAborted,
        HistoryEventType.ExecutionTimedOut,
    }
)

_program_eval = Program.eval
_add_event = EventManager.add_event
_execution_stop = Execution.stop


def _eval_until_ended(self: Program, env: Environment) -> None:
    if env.is_frame():
        _program_eval(self, env)
        return
    timeout = self.timeout_seconds.timeout_seconds if self.timeout_seconds else None
    deadline = None if timeout is None else time.monotonic() + timeout
    env.next_state_name = self.start_at.start_at_name
    # Set, and never cleared, when the program is stopped or its states' thread ends.
    wake = env.__dict__[_WAKE] = threading.Event()

    def run_states() -> None:
        try:
            EvalComponent.eval(self, env)
        finally:
            wake.set()

    states = threading.Thread(target=run_states, daemon=True)
    TMP_THREADS.append(states)
    states.start()
    while states.is_alive():
        if isinstance(env._program_state, (ProgramStopped, ProgramTimedOut)):
            _end_now(env)
            return
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            env.set_timed_out()
            continue
        wake.wait(left)
        states.join(0.001 if wake.is_set() else 0)  # ending on its own: let it finish


def _end_now(env: Environment) -> None:
    """Record the ending as `Program._eval_body` would once the running state returned, and
    nothing more of this execution."""
    state = env._program_state
    details: Any  # moto's EventDetails, which it builds with the one key an event has
    if isinstance(state, ProgramStopped):
        kind = HistoryEventType.ExecutionAborted
        details = {"executionAbortedEventDetails": {"error": state.error, "cause": state.cause}}
    else:
        kind = HistoryEventType.ExecutionTimedOut
        details = {"executionTimedOutEventDetails": {}}
    manager = env.event_manager
    with _events:
        if manager.__dict__.get(_CLOSED):
            return  # the states' thread recorded the ending first
        if kind is HistoryEventType.ExecutionAborted:
            env.event_history_context.source_event_id = 0
        _add_event(manager, context=env.event_history_context, event_type=kind, event_details=details)
        manager.__dict__[_CLOSED] = True


def _add_event_unless_ended(self: EventManager, *args: Any, **kwargs: Any) -> int:
    kind = kwargs.get("event_type", args[1] if len(args) > 1 else None)
    with _events:
        if self.__dict__.get(_CLOSED):
            return 0  # the execution ended: AWS records nothing of the states still running
        event_id: int = _add_event(self, *args, **kwargs)
        if kind in _ENDINGS:
            self.__dict__[_CLOSED] = True
        return event_id


def _waking(set_stop: Any) -> Any:
    def set_stop_and_wake(self: Environment, stop_date: Any, cause: str | None, error: str | None) -> None:
        set_stop(self, stop_date=stop_date, cause=cause, error=error)
        wake = self.__dict__.get(_WAKE)
        if wake is not None:
            wake.set()

    return set_stop_and_wake


def _stop_and_answer_when_ended(
    self: Execution, stop_date: Any, error: str | None, cause: str | None
) -> None:
    _execution_stop(self, stop_date=stop_date, error=error, cause=cause)
    deadline = time.monotonic() + STOP_ANSWER_SECONDS
    while self.exec_status == ExecutionStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.005)


def install() -> None:
    # After `stop_interrupts_waits`, whose stop this one wraps (it is taken as installed then).
    Environment.set_stop = _waking(Environment.set_stop)  # type: ignore[method-assign]
    Program.eval = _eval_until_ended  # type: ignore[method-assign]
    EventManager.add_event = _add_event_unless_ended  # type: ignore[method-assign]
    Execution.stop = _stop_and_answer_when_ended  # type: ignore[method-assign]
