"""Runs our handlers in-process wherever moto would run a Lambda function.

Every path by which moto runs a function (the Invoke API, Step Functions Lambda tasks,
event source mappings) goes through `LambdaFunction._invoke_lambda`, which needs Docker.
Replacing it once per process with a call of the handler named in the function's
configuration runs the real handler, unchanged.
"""

import importlib
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from moto.awslambda.models import LambdaFunction

from toolpipe.infra.functions import FunctionSpec

_lock = threading.Lock()
_installed = False


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
    module_name, function_name = handler_path.rsplit(".", 1)
    return getattr(importlib.import_module(module_name), function_name)(event, context)


def call_function(spec: FunctionSpec, event: Any) -> Any:
    """Invoke one of the stack's functions in-process, as Lambda would: its handler, a fresh context."""
    return call_handler(spec.handler, event, LocalContext.of(spec))


def _invoke_in_process(self: LambdaFunction, event: Any = None) -> tuple[str, bool, str]:
    if isinstance(event, str | bytes):
        event = json.loads(event or "{}")
    context = LocalContext(function_name=self.function_name, timeout_seconds=int(self.timeout))
    try:
        result = call_handler(str(self.handler), event or {}, context)
    except Exception as e:  # reported to the caller the way Lambda reports a function error
        return json.dumps({"errorType": type(e).__name__, "errorMessage": str(e)}), True, ""
    return json.dumps(result), False, ""


def install() -> None:
    global _installed
    with _lock:
        if not _installed:
            LambdaFunction._invoke_lambda = _invoke_in_process  # type: ignore[method-assign]
            _installed = True
