"""An error raised while an execution stops does not replace the stop.

moto: stopping an execution while an inline Map runs makes the Map's abort handling raise (it
reads the stop's error string as a dict), and that error overwrote the stop.

Why it matters: the execution ended FAILED instead of ABORTED, and a run stopped by hand was
reported as a failure of its state machine.

The patch: once the program is stopped, a later error is ignored; it ends ABORTED.
"""

from typing import Any

from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped

CHECKED_WITH = ("5.2.5",)

_set_error = Environment.set_error


def _keep_the_stop(self: Environment, error: Any) -> None:
    if isinstance(self._program_state, ProgramStopped):
        return
    _set_error(self, error)


def install() -> None:
    Environment.set_error = _keep_the_stop  # type: ignore[method-assign]
