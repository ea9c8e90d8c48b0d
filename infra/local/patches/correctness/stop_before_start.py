"""An execution stopped before its interpreter state exists ends aborted.

moto: an execution's interpreter state is built on its own thread after `StartExecution`
answers. A `StopExecution` in between raised on the missing state and answered 500, or, a
moment later (no running state yet), was ignored and the execution ran on.

Why it matters: a run cancelled right after it started got a server error, or was not stopped.

The patch: such a stop is kept and applied when the program starts, so the execution ends
aborted before its first state, as on AWS.
"""

import threading
from typing import Any

from moto.stepfunctions.parser.asl.component.program.program import Program
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

CHECKED_WITH = ("5.2.5",)

_stops_lock = threading.Lock()
_new_environment = ExecutionWorker._get_evaluation_environment
_program_body = Program._eval_body


def _environment_knowing_its_worker(self: ExecutionWorker) -> Environment:
    environment = _new_environment(self)
    environment.__dict__["_toolpipe_worker"] = self  # frames are new objects: the root alone has it
    return environment


def _program_body_applying_a_stop(self: Program, env: Environment) -> None:
    worker = env.__dict__.get("_toolpipe_worker")
    if worker is not None:
        with _stops_lock:
            worker.__dict__["_toolpipe_running"] = True
            pending = worker.__dict__.pop("_toolpipe_stop", None)
        if pending is not None:
            env.set_stop(**pending)
    _program_body(self, env)


def _stop_when_running(self: ExecutionWorker, stop_date: Any, error: str | None, cause: str | None) -> None:
    # Before the program runs, moto's `set_stop` raised (no state yet) or was ignored (no
    # running state yet): the stop waits for the program's first step instead.
    with _stops_lock:
        if not self.__dict__.get("_toolpipe_running"):
            self.__dict__["_toolpipe_stop"] = {"stop_date": stop_date, "cause": cause, "error": error}
            return
    assert self.env is not None  # set before the program runs
    self.env.set_stop(stop_date=stop_date, cause=cause, error=error)


def install() -> None:
    ExecutionWorker._get_evaluation_environment = _environment_knowing_its_worker  # type: ignore[method-assign]
    ExecutionWorker.stop = _stop_when_running  # type: ignore[method-assign]
    Program._eval_body = _program_body_applying_a_stop  # type: ignore[method-assign]
