"""Runs our handlers in-process wherever moto would run a Lambda function.

Every path by which moto runs a function (the Invoke API, Step Functions Lambda tasks,
event source mappings) goes through `LambdaFunction._invoke_lambda`, which needs Docker.
Replacing it once per process with a call of the handler named in the function's
configuration runs the real handler, unchanged, as its function: with the function's own
environment and role (`infra/local/isolation.py`), registered here by the runtime.
"""

import contextlib
import importlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from moto.awslambda.models import LambdaFunction
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

from toolpipe.infra.cdk.functions import ORCHESTRATOR, FunctionSpec
from toolpipe.infra.local.app_reload import STEPS
from toolpipe.infra.local.caller import FunctionContext, current, running_as
from toolpipe.infra.local.process_patch import Patched

# The running runtime's functions, by every name an invocation may give (the spec's, moto's).
_functions: dict[str, FunctionContext] = {}
# What executions of the state machine run as: its role.
_state_machine: FunctionContext | None = None
_running = 0  # handler invocations in progress
# Of those, the Lambda tasks of executions, by the state machine context they run for: a
# stopped execution ends at once and leaves its task running (patches/correctness/stop_ends_at_once.py).
_tasks: dict[int, int] = {}
_running_lock = threading.Lock()


def register(context: FunctionContext, *names: str) -> None:
    for name in names:
        _functions[name] = context


def run_executions_as(context: FunctionContext) -> None:
    global _state_machine
    _state_machine = context


def unregister_all() -> None:
    """The runtime stops: its functions' threads still running (a tool that hung) call nothing."""
    global _state_machine
    for context in (*_functions.values(), _state_machine):
        if context is not None:
            context.stopped = True
    _functions.clear()
    _state_machine = None


@dataclass
class LocalContext:
    """The attributes of a Lambda context object that our handlers and Powertools read."""

    function_name: str
    timeout_seconds: int
    memory_limit_in_mb: int = 512
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = ""
    _started: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, spec: FunctionSpec) -> "LocalContext":
        """A new invocation's context for one of the stack's functions: its timeout, its memory."""
        return cls(
            function_name=spec.name, timeout_seconds=spec.timeout_seconds, memory_limit_in_mb=spec.memory_mb
        )

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._started + self.timeout_seconds - time.monotonic()) * 1000))


def call_handler(handler_path: str, event: Any, context: LocalContext) -> Any:
    """Run a handler as the function `context` names (unchecked if the runtime has no such
    function: a handler called outside a runtime, in a test of its own)."""
    module_name, function_name = handler_path.rsplit(".", 1)
    # A model step runs with one version of the app: a reload waits for it (app_reload.py).
    step = STEPS.step() if handler_path == ORCHESTRATOR.handler else contextlib.nullcontext()
    with _counted(), step, running_as(_functions.get(context.function_name)):
        return getattr(importlib.import_module(module_name), function_name)(event, context)


@contextlib.contextmanager
def _counted() -> Iterator[None]:
    global _running
    with _running_lock:
        _running += 1
    try:
        yield
    finally:
        with _running_lock:
            _running -= 1


def in_progress() -> int:
    """How many handler invocations are running now (an idle server has none)."""
    with _running_lock:
        return _running


def call_function(spec: FunctionSpec, event: Any) -> Any:
    """Invoke one of the stack's functions in-process, as Lambda would: its handler, a fresh
    context with the timeout and memory the runtime's template gives it."""
    function = _functions.get(spec.name)
    context = (
        LocalContext(spec.name, function.timeout_seconds, function.memory_mb)
        if function is not None
        else LocalContext.of(spec)
    )
    return call_handler(spec.handler, event, context)


def tasks_in_progress(state_machine: FunctionContext) -> int:
    """How many Lambda tasks of the state machine's executions are running now."""
    with _running_lock:
        return _tasks.get(id(state_machine), 0)


@contextlib.contextmanager
def _counted_as_task() -> Iterator[None]:
    """Counted among its state machine's tasks when an execution is the caller."""
    caller = current()
    key = id(caller) if caller is not None and caller is _state_machine else None
    if key is None:
        yield
        return
    with _running_lock:
        _tasks[key] = _tasks.get(key, 0) + 1
    try:
        yield
    finally:
        with _running_lock:
            _tasks[key] -= 1
            if not _tasks[key]:
                del _tasks[key]


def _invoke_in_process(self: LambdaFunction, event: Any = None) -> tuple[str, bool, str]:
    if isinstance(event, str | bytes):
        event = json.loads(event or "{}")
    context = LocalContext(function_name=self.function_name, timeout_seconds=int(self.timeout))
    try:
        with _counted_as_task():
            result = call_handler(str(self.handler), event or {}, context)
    except Exception as e:  # reported to the caller the way Lambda reports a function error
        return json.dumps({"errorType": type(e).__name__, "errorMessage": str(e)}), True, ""
    return json.dumps(result), False, ""


_start_execution = ExecutionWorker.start


def _start_as_state_machine(self: ExecutionWorker) -> None:
    # The execution's thread is started inside whoever's StartExecution it is, and would act as
    # them: its tasks call AWS as the state machine's role instead.
    with running_as(_state_machine):
        _start_execution(self)  # type: ignore[no-untyped-call]


_PATCHED = Patched(
    [
        (LambdaFunction, "_invoke_lambda", _invoke_in_process),
        (ExecutionWorker, "start", _start_as_state_machine),
    ]
)


def install() -> Callable[[], None]:
    """Lambda invokes run our handlers, executions run as the state machine, until the last
    runtime's undo."""
    return _PATCHED.install()
