"""A Wait state with a timestamp waits until that time, never less.

moto: it drops the timestamp's fraction of a second, reads it as local time, and waits the whole
seconds left, cut down (0.9 s left: no wait at all). A wait could end up to two seconds early.

Why it matters: the timer of a run whose waits for people do not count waits until its next
check (shared/runs/active_time.py); ended early, the check finds the limit not passed yet and
asks for another, in a loop of checks seconds long, each writing history events. On AWS the
state ends when the time is reached.

The patch: the time left to the whole timestamp (UTC, fraction included), rounded up to a second.
"""

import math
from datetime import UTC, datetime

from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEventException
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.timestamp import Timestamp
from moto.stepfunctions.parser.asl.eval.environment import Environment

CHECKED_WITH = ("5.2.5",)


def _wait_seconds(self: Timestamp, env: Environment) -> int:
    self.string.eval(env=env)
    text: str = env.stack.pop()
    if self._from_timestamp_string(timestamp=text) is None:  # moto's own check of the format
        raise FailureEventException(self._create_failure_event(env, text))
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return max(0, math.ceil((at - datetime.now(UTC)).total_seconds()))


def install() -> None:
    Timestamp._get_wait_seconds = _wait_seconds  # type: ignore[method-assign]
