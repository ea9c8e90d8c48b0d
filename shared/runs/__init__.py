from shared.runs.ports import (
    ExecutionStarter,
    StepFunctionsStarter,
    StepFunctionsTaskReporter,
    TaskReporter,
)
from shared.runs.service import ModelStep, RunStarter, ToolCallExecutor, monotonic_deadline

__all__ = [
    "ExecutionStarter",
    "ModelStep",
    "RunStarter",
    "StepFunctionsStarter",
    "StepFunctionsTaskReporter",
    "TaskReporter",
    "ToolCallExecutor",
    "monotonic_deadline",
]
