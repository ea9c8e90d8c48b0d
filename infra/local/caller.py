"""Which local function is running: carried in a context variable, entered by
`infra/local/lambdas.py` for each invocation, read by the IAM check (`iam.py`) and the
per-function environment (`isolation.py`), and handed to the threads a function starts
(`threads_inherit`, which wraps `Thread.start` once a process)."""

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolpipe.infra.local.iam import Policy


@dataclass
class FunctionContext:
    """What one local function runs with."""

    name: str
    environment: dict[str, str]
    # Who calls AWS: the function's role, as `iam.py` authorizes it.
    policy: "Policy"
    # Names this function's environment answers alone (present or absent).
    owned: frozenset[str] = field(default_factory=frozenset)
    # Local settings read from the process when it sets them (the CLI sets some after start:
    # the scripted model's URL, the local server's link base), else from `environment`.
    passthrough: frozenset[str] = field(default_factory=frozenset)
    # The function's timeout and memory, as the template sets them (0: not a function).
    timeout_seconds: int = 0
    memory_mb: int = 0
    # Set when the runtime stops: a thread of the function still running then calls nothing.
    stopped: bool = False
    # A tool runner's: the function whose presigned links its tools follow (`s3_links.py`).
    link_signer: "FunctionContext | None" = None


_current: contextvars.ContextVar[FunctionContext | None] = contextvars.ContextVar(
    "toolpipe_local_function", default=None
)


def current() -> FunctionContext | None:
    return _current.get()


@contextlib.contextmanager
def running_as(context: FunctionContext | None) -> Iterator[None]:
    token = _current.set(context)
    try:
        yield
    finally:
        _current.reset(token)


_inheriting = False
_inheriting_lock = threading.Lock()


def threads_inherit() -> None:
    """Threads started from now on inherit the function their starter runs as: installed
    once a process and never undone (a thread a function starts can outlive its runtime, and
    must go on acting as that function: `stopped_calls.py`). Once, so a thread's `run` is
    wrapped once, whichever of the runtime's parts asked first."""
    global _inheriting
    with _inheriting_lock:
        if not _inheriting:
            threading.Thread.start = starting_in_context(threading.Thread.start)  # type: ignore[method-assign, assignment]
            _inheriting = True


def starting_in_context(original: Callable[[threading.Thread], None]) -> Callable[[threading.Thread], None]:
    """`Thread.start`, the thread inheriting the function its starter runs as (Python 3.11's
    threads start in an empty context): a tool's timeout thread, a heartbeat, a thread of the
    tool's own all act as the function."""

    def start(self: threading.Thread) -> None:
        context = _current.get()
        if context is not None:
            run = self.run

            def run_as_function() -> None:
                _current.set(context)
                run()

            self.run = run_as_function  # type: ignore[method-assign]
        original(self)

    return start
