"""The run services, one module each. Names are re-exported lazily (PEP 562): each function
imports only its own service's module, so the tool worker does not pay for the model step,
nor the API for the tool executor, at every cold start."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.runs.model_step import ModelStep, monotonic_deadline
    from shared.runs.ports import (
        ExecutionStarter,
        StepFunctionsStarter,
        StepFunctionsTaskReporter,
        TaskReporter,
    )
    from shared.runs.starter import RunStarter, StartedRun
    from shared.runs.tool_executor import ToolCallExecutor

# Each public name and the module that defines it.
_EXPORTS = {
    "ExecutionStarter": "shared.runs.ports",
    "ModelStep": "shared.runs.model_step",
    "RunStarter": "shared.runs.starter",
    "StartedRun": "shared.runs.starter",
    "StepFunctionsStarter": "shared.runs.ports",
    "StepFunctionsTaskReporter": "shared.runs.ports",
    "TaskReporter": "shared.runs.ports",
    "ToolCallExecutor": "shared.runs.tool_executor",
    "monotonic_deadline": "shared.runs.model_step",
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
