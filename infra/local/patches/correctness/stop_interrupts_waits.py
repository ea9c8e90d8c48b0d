"""A stop interrupts the tasks waiting for their token.

moto: a task waiting for its token (`.waitForTaskToken`) only noticed a `StopExecution` at its
next heartbeat, answer or timeout.

Why it matters: a stopped run went on looking alive, up to an hour (the task's timeout) later,
and its ending event came that late.

The patch: stopping an execution interrupts every wait of its callback pool.
"""

from typing import Any

from moto.stepfunctions.parser.asl.eval.environment import Environment

CHECKED_WITH = ("5.2.5",)

_set_stop = Environment.set_stop


def _stop_now(self: Environment, stop_date: Any, cause: str | None, error: str | None) -> None:
    _set_stop(self, stop_date=stop_date, cause=cause, error=error)
    for endpoint in list(self.callback_pool_manager._pool.values()):
        endpoint.interrupt_all()


def install() -> None:
    Environment.set_stop = _stop_now  # type: ignore[method-assign]
