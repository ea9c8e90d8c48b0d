"""The run services, one module each. Names are re-exported lazily (PEP 562): each function
imports only its own service's module, so the tool worker does not pay for the model step,
nor the API for the tool executor, at every cold start."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolpipe.shared.runs.model_step import ModelStep, monotonic_deadline
    from toolpipe.shared.runs.ports import (
        ExecutionStarter,
        StepFunctionsStarter,
        StepFunctionsTaskReporter,
        TaskReporter,
    )
    from toolpipe.shared.runs.starter import RunStarter, StartedRun
    from toolpipe.shared.runs.tool_executor import ToolCallExecutor

# Each public name and the module that defines it.
_EXPORTS = {
    "ExecutionStarter": "toolpipe.shared.runs.ports",
    "ModelStep": "toolpipe.shared.runs.model_step",
    "RunStarter": "toolpipe.shared.runs.starter",
    "StartedRun": "toolpipe.shared.runs.starter",
    "StepFunctionsStarter": "toolpipe.shared.runs.ports",
    "StepFunctionsTaskReporter": "toolpipe.shared.runs.ports",
    "TaskReporter": "toolpipe.shared.runs.ports",
    "ToolCallExecutor": "toolpipe.shared.runs.tool_executor",
    "monotonic_deadline": "toolpipe.shared.runs.model_step",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ExecutionStarter",
    "ModelStep",
    "RunStarter",
    "StartedRun",
    "StepFunctionsStarter",
    "StepFunctionsTaskReporter",
    "TaskReporter",
    "ToolCallExecutor",
    "monotonic_deadline",
]
