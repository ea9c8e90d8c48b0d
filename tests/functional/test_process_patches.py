"""What the local runtime changes in its own process (botocore's API call, moto's Lambda invoke,
execution start and end, request dispatch and S3 notifications, `os.environ`, urllib's opener)
is one lifecycle: each install returns its undo, the runtime runs them when it
stops, and the last one down puts every original back (issue 32). What is compared is the process
as a runtime's first start leaves it: moto's patches (`infra/local/patches/`) and the guard
against a stopped function's calls (`stopped_calls.py`) are installed once a process and kept, by
design, under the request dispatch and API call the runtime wraps; a test that ran first in its
process compared against moto's own dispatch. `Thread.start` is wrapped once a process and kept
too (threads inherit the function that started them, past its runtime's stop)."""

import ast
import inspect
import os
import threading
import urllib.request
from pathlib import Path

import pytest
from botocore.client import BaseClient
from moto.awslambda.models import LambdaFunction
from moto.core.botocore_stubber import BotocoreStubber
from moto.s3 import notifications
from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

from toolpipe.infra.local import (
    execution_events,
    iam,
    isolation,
    lambdas,
    patches,
    s3_links,
    serial,
    stopped_calls,
    triggers,
)
from toolpipe.infra.local.runtime import LocalRuntime

patches.install()
stopped_calls.install()


def _current() -> list[object]:
    return [
        BaseClient._make_api_call,  # type: ignore[attr-defined]
        LambdaFunction._invoke_lambda,
        ExecutionWorker.start,
        os.environ,
        BotocoreStubber.process_request,
        BaseExecutionWorkerCommunication.terminated,
        notifications._get_s3_event,
        urllib.request._opener,  # type: ignore[attr-defined]
    ]


INSTALLS = (
    iam.install,
    lambdas.install,
    isolation.install,
    serial.install,
    execution_events.install,
    triggers.install,
    s3_links.install,
)


def test_a_stopped_runtime_leaves_the_process_as_it_found_it() -> None:
    before = _current()
    with LocalRuntime(workers=0):
        during = _current()
    assert all(a is b for a, b in zip(_current(), before, strict=True))
    assert not any(a is b for a, b in zip(during, before, strict=True))


def test_installs_nest_and_each_undo_runs_once() -> None:
    before = _current()
    undos = [install() for install in INSTALLS]
    again = [install() for install in INSTALLS]
    for undo in again:
        undo()
        undo()  # twice: still one undo
    assert not any(a is b for a, b in zip(_current(), before, strict=True))
    for undo in undos:
        undo()
    assert all(a is b for a, b in zip(_current(), before, strict=True))


def test_a_thread_a_function_starts_acts_as_it_through_one_wrapper() -> None:
    """The guard (`stopped_calls.py`) and the per-function isolation both need threads to
    inherit their starter's function: `Thread.start` is wrapped once, kept for the process."""
    start = threading.Thread.start
    seen: list[tuple[object, int]] = []

    def body() -> None:
        wrappers = sum(frame.function == "run_as_function" for frame in inspect.stack())
        seen.append((isolation.current(), wrappers))

    with LocalRuntime(workers=0) as runtime:
        assert threading.Thread.start is start
        context = runtime.functions["tool_worker"]
        with isolation.running_as(context):
            thread = threading.Thread(target=body)
            thread.start()
            thread.join()
    assert threading.Thread.start is start
    assert seen == [(context, 1)]


def _imports(module: object) -> set[str]:
    tree = ast.parse(Path(str(getattr(module, "__file__", ""))).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_the_iam_check_and_the_isolation_do_not_import_each_other() -> None:
    """The running function's identity is a module of its own (`caller.py`) that both read."""
    assert not any("isolation" in name for name in _imports(iam))
    assert not any(name.endswith(".iam") or ".iam." in name for name in _imports(isolation))


def test_what_the_runtimes_own_calls_raise_is_caught_by_the_classes_of_the_clients_it_hands_out() -> None:
    # A later runtime of the process calls through the clients the first one made; botocore
    # makes a service's exception classes per session: the ones it hands out share theirs.
    with LocalRuntime(workers=0):
        pass
    with LocalRuntime(workers=0) as runtime:
        missing = f"{runtime.state_machine_arn.replace(':stateMachine:', ':execution:')}:nope"
        with pytest.raises(runtime.sfn.exceptions.ExecutionDoesNotExist):
            runtime._aws.sfn.describe_execution(executionArn=missing)
