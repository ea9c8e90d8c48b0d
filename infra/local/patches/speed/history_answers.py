"""An execution's history answers with its events dumped as they are, not through the serializer.

moto: GetExecutionHistory goes through the shape-driven serializer, which visits every member
of every event's shape (~60, one details field per event type; `absent_members` only makes the
absent ones cheaper) and hands each value to the attribute picker.

Why it matters: the orchestrator reads each ended execution's whole history to count its
transitions: with `absent_members`, still ~7% of a 10-turn run's CPU.

The patch: moto's interpreter keeps the events as the API's own structures (plain dicts named
as the shape's members), so each is copied as it is, with what the serializer changes: members
that are None left out, timestamps in the shape's format. Members are checked against the
shape as they are copied; a key the shape lacks, or a type other than the ones a history holds,
sends the whole answer the serializer's way, unchanged.
"""

import json
from enum import Enum
from typing import Any

from botocore.model import ListShape, Shape, StructureShape
from moto.core.responses import ActionContext, ActionResult
from moto.core.serialize import TimestampSerializer
from moto.stepfunctions.responses import StepFunctionResponse

from toolpipe.infra.local.patches.speed import utc_timestamps

CHECKED_WITH = ("5.2.5",)

_original_history = StepFunctionResponse.get_execution_history
# The handler this patch wraps, taken when it is installed: the correctness patch's pages
# (patches/correctness/history_pages.py) are installed first.
_paged_history = _original_history
_SCALARS = {"string": str, "boolean": bool, "long": int, "integer": int}
# The JSON protocols' default format; a shape may name its own (`timestampFormat`).
_TIMESTAMPS = TimestampSerializer(TimestampSerializer.TIMESTAMP_FORMAT_UNIX)


class _NotAsBuilt(Exception):
    """A value the copy does not know how to write as the serializer would."""


def _as_wire(value: Any, shape: Shape) -> Any:
    kind = shape.type_name
    if isinstance(shape, StructureShape):
        if type(value) is not dict:
            raise _NotAsBuilt
        members = shape.members
        out = {}
        for key, member in value.items():
            if member is None:
                continue
            if key not in members:  # the picker might find it under another name: its way
                raise _NotAsBuilt
            out[key] = _as_wire(member, members[key])
        return out
    if isinstance(shape, ListShape):
        if type(value) is not list:
            raise _NotAsBuilt
        return [_as_wire(item, shape.member) for item in value]
    if kind == "timestamp":
        form = shape.serialization.get("timestampFormat", TimestampSerializer.TIMESTAMP_FORMAT_UNIX)
        return utc_timestamps.convert(_TIMESTAMPS, value, form)
    if isinstance(value, Enum):  # the event types are `str` enums: their value is the text
        value = value.value
    scalar = _SCALARS.get(kind)
    if scalar is None or type(value) is not scalar:
        raise _NotAsBuilt
    return value


class HistoryAnswer(ActionResult):
    """GetExecutionHistory's result, written as the wire's JSON directly when it can be."""

    def execute_result(self, context: ActionContext) -> Any:
        return self._copied(context) or super().execute_result(context)

    def _copied(self, context: ActionContext) -> tuple[int, dict[str, str], str] | None:
        shape = context.operation_model.output_shape
        try:
            if shape is None:
                raise _NotAsBuilt
            answer = _as_wire(self.result, shape)
        except _NotAsBuilt:
            return None
        return 200, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(answer)


def get_execution_history(self: StepFunctionResponse) -> ActionResult:
    """The handler installed before this patch, whose answer is `HistoryAnswer`."""
    return HistoryAnswer(_paged_history(self).result)


def install() -> None:
    global _paged_history
    if StepFunctionResponse.get_execution_history is not get_execution_history:
        _paged_history = StepFunctionResponse.get_execution_history
    StepFunctionResponse.get_execution_history = get_execution_history  # type: ignore[method-assign]
