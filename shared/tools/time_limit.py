"""Run a piece of someone else's code (a tool, its hooks) for at most so many seconds."""

import concurrent.futures
import contextvars
import threading
from collections.abc import Callable
from typing import Any


class Overran(Exception):
    """The code ran past its limit: a thread still runs it, or its coroutine was cancelled."""


def run_with_limit(fn: Callable[..., Any], args: tuple[Any, ...], limit: float, name: str) -> Any:
    """`fn(*args)` in a thread of its own, given up on after `limit` seconds (`Overran`).

    Python cannot stop a thread: one that overruns keeps running. It is a daemon thread, so it
    never holds a process open, and on Lambda the invocation ends and freezes it. Whatever `fn`
    raises (`SystemExit` included) is raised here, in the caller's thread. The thread runs in a
    copy of the caller's context (contextvars: a trace, a local function's identity)."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    context = contextvars.copy_context()

    def body() -> None:
        try:
            future.set_result(context.run(fn, *args))
        except BaseException as e:  # handed to the caller, whatever it is
            future.set_exception(e)

    threading.Thread(target=body, name=name, daemon=True).start()
    try:
        return future.result(timeout=limit)
    except TimeoutError:
        if future.done() and not isinstance(future.exception(), Overran):
            raise  # the code's own TimeoutError, raised in time: its error, not an overrun
        raise Overran() from None
