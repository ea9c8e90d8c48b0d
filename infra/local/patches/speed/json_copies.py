"""A state's JSON payloads are copied as JSON, not through `copy.deepcopy`.

moto: the Step Functions interpreter deep-copies each state's input, output, context and stack
as it goes (a state entered, a path applied, a Map's or a Task's frame opened, an event's
details recorded), with `copy.deepcopy`: a memo of every object and a dispatch per value.

Why it matters: those copies were ~3% of a local run's CPU, and every turn of every run enters
several states.

The patch: the interpreter's modules see a `copy` whose `deepcopy` copies a value made only of
dicts, lists, strings, numbers, booleans and None (JSON's values: what a state's payload is)
with a plain recursive copy, and hands anything else (a state machine, a program state, a job)
to `copy.deepcopy` as before. The one difference: a list or dict the value holds twice is
copied twice, not once and shared. A payload read from JSON never holds one twice, but moto's
intrinsic functions can build one that does (`States.Array($.x, $.x)`), and a later write
through one path (`ResultPath: "$.arr[0].z"`) then showed at the other in moto's own copies:
copied as JSON, each is its own, as on AWS, whose payloads are JSON text between states.
"""

import copy
import importlib
from types import ModuleType
from typing import Any

CHECKED_WITH = ("5.2.5",)

# The interpreter's modules that deep-copy payloads (each imports `copy` as a module).
MODULES = (
    "moto.stepfunctions.parser.asl.component.common.string.string_expression",
    "moto.stepfunctions.parser.asl.component.common.path.result_path",
    "moto.stepfunctions.parser.asl.component.intrinsic.function.statesfunction.json_manipulation.json_merge",
    "moto.stepfunctions.parser.asl.component.state.exec.state_map.state_map",
    "moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.job",
    "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service",
    "moto.stepfunctions.parser.asl.component.state.exec.state_parallel.state_parallel",
    "moto.stepfunctions.parser.asl.component.state.exec.execute_state",
    "moto.stepfunctions.parser.asl.eval.states",
    "moto.stepfunctions.parser.asl.eval.event.event_manager",
    "moto.stepfunctions.parser.asl.eval.environment",
)
_ATOMS = frozenset({str, int, float, bool, type(None)})


class _NotJson(Exception):
    """A value holds something JSON does not: `copy.deepcopy` copies it."""


def _json_copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        copied = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotJson
            copied[key] = _json_copy(item)
        return copied
    if kind is list:
        return [_json_copy(item) for item in value]
    if kind in _ATOMS:
        return value
    raise _NotJson


class _JsonCopy:
    """The `copy` module as the interpreter's modules see it."""

    copy = staticmethod(copy.copy)

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        if memo is None:
            try:
                return _json_copy(value)
            except _NotJson:
                pass
        return copy.deepcopy(value, memo)


def install() -> None:
    for name in MODULES:
        module: ModuleType = importlib.import_module(name)
        module.copy = _JsonCopy  # type: ignore[attr-defined]
