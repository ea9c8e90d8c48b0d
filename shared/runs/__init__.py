from toolpipe.shared.runs.model_step import ModelStep, monotonic_deadline
from toolpipe.shared.runs.ports import (
    ExecutionStarter,
    StepFunctionsStarter,
    StepFunctionsTaskReporter,
    TaskReporter,
)
from toolpipe.shared.runs.starter import RunStarter, StartedRun
from toolpipe.shared.runs.tool_executor import ToolCallExecutor

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
