"""The local runner functions' calls, each in a process of its own, as deployed.

For each runner function of the template, a template process (shared/runs/call_process.py) is
started at its first call, as a fresh interpreter would be (forked from one that has imported
toolpipe and its libraries, never the app: `fork_server.py`), with the runner's environment only: the
function's own (its template environment, as `isolation.py` answers it) and the developer's
other settings, without any local setting of toolpipe's (`TOOLPIPE_HOME`: the approval links'
key and every run's state), the model's settings or the developer's AWS credentials, in a folder
of its own. Its AWS calls go to a broker of this runtime (`aws_broker.py`) that makes them as
that runner, IAM-checked. Tool code is never in the runtime's process: it cannot patch the
runtime, read its memory or skip its IAM check from there.
"""

import ctypes
import functools
import os
import sys
from collections.abc import Iterable

from toolpipe.infra.local import aws_forwarding, fork_server
from toolpipe.infra.local.aws_broker import REGION, AwsBroker
from toolpipe.infra.local.isolation import FunctionContext, running_as
from toolpipe.shared.app_ref import APP_ENV
from toolpipe.shared.runs import call_runner
from toolpipe.shared.runs.call_host import MAIN_FILE_ENV

# Port 9 (discard) refuses: a botocore call a tool made around the broker reaches nothing.
NOWHERE = "http://127.0.0.1:9"
_MODEL_SETTINGS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY_SECRET_ARN")
_PR_SET_DUMPABLE = 4


def environment(context: FunctionContext, broker_path: str) -> dict[str, str]:
    """What a runner's tool processes get: see the module's docstring."""
    with running_as(context):
        seen = dict(os.environ)
    kept = {
        name: value
        for name, value in seen.items()
        if (not name.startswith("TOOLPIPE_") or name in context.environment)
        and not name.startswith("AWS_")
        and name not in _MODEL_SETTINGS
    }
    kept.update(
        {
            "AWS_ACCESS_KEY_ID": "tool-runner",
            "AWS_SECRET_ACCESS_KEY": "tool-runner",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": NOWHERE,
            aws_forwarding.LOCAL_AWS_ENV: broker_path,
            # The app and what it imports, from where this process imports them.
            "PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in sys.path if p),
        }
    )
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if kept.get(APP_ENV) == "__main__" and main_file:
        kept[MAIN_FILE_ENV] = os.path.abspath(str(main_file))
    for name in (
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
        "AWS_LAMBDA_FUNCTION_TIMEOUT",
    ):
        if name in context.environment:
            kept[name] = context.environment[name]
    return kept


class ToolProcesses:
    """`with ToolProcesses(runners):` each runner function's calls in processes of their own.

    Args:
        runners: each runner function's context and every name an invocation may give it.
    """

    def __init__(self, runners: Iterable[tuple[FunctionContext, tuple[str, ...]]]) -> None:
        self._runners = list(runners)
        self._brokers: list[AwsBroker] = []
        self._processes: list[call_runner.CallProcesses] = []
        self._names: list[str] = []

    def __enter__(self) -> "ToolProcesses":
        if self._runners and sys.platform.startswith("linux"):
            # Not dumpable: a tool process of the same user cannot read this process's memory or
            # its starting environment (/proc/PID/environ, /proc/PID/mem), where the model key was.
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        for context, names in self._runners:
            broker = AwsBroker(context).__enter__()
            self._brokers.append(broker)
            env = environment(context, broker.path)
            processes = call_runner.CallProcesses.started_by(
                functools.partial(fork_server.start_template, env)
            )
            broker.admits = processes.holds  # this runner's calls, never another runner's
            self._processes.append(processes)
            for name in names:
                call_runner.register(name, processes)
                self._names.append(name)
        return self

    def renew(self) -> None:
        """The app changed: each runner's next call starts a template that imports it anew."""
        for processes in self._processes:
            processes.renew()

    def __exit__(self, *exc: object) -> None:
        for name in self._names:
            call_runner.unregister(name)
        for processes in self._processes:
            processes.close()
        for broker in self._brokers:
            broker.close()
