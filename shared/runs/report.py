"""What ran in a run: every tool call with its arguments, result, status, duration, attempts."""

import json
from typing import Any

from pydantic import BaseModel

from shared.messages import AssistantMessage, HistoryItem, ToolResult

# Results longer than this are shown as a preview plus a reference to the full message.
PREVIEW_CHARS = 1000


class ToolExecution(BaseModel):
    call_id: str
    tool: str
    turn: int
    arguments: Any  # parsed JSON where the model sent valid JSON, else the raw text
    status: str  # ok | error | pending (no result yet)
    result: str | None = None
    result_chars: int | None = None
    result_ref: str | None = None  # the history item holding the whole result
    full_result_ref: str | None = None  # S3 key of a result longer than the agent's max_result_chars
    error_type: str | None = None
    error_detail: str | None = None
    duration_ms: int | None = None
    attempts: int | None = None


def tool_executions(run_id: str, history: list[HistoryItem]) -> list[ToolExecution]:
    results = {i.call_id: i for i in history if isinstance(i, ToolResult)}
    report = []
    for reply in (i for i in history if isinstance(i, AssistantMessage)):
        for index, call in enumerate(reply.tool_calls):
            try:
                arguments: Any = json.loads(call.arguments)
            except ValueError:
                arguments = call.arguments
            result = results.get(call.id)
            entry = ToolExecution(
                call_id=call.id, tool=call.name, turn=reply.turn, arguments=arguments, status="pending"
            )
            if result is not None:
                long = len(result.content) > PREVIEW_CHARS
                entry = entry.model_copy(
                    update={
                        "status": result.status,
                        "result": result.content[:PREVIEW_CHARS] + "…" if long else result.content,
                        "result_chars": len(result.content),
                        "result_ref": f"/runs/{run_id}/messages/{reply.seq + 1 + index}" if long else None,
                        "error_type": result.error_type,
                        "error_detail": result.error_detail,
                        "duration_ms": result.duration_ms,
                        "attempts": result.attempts,
                        "full_result_ref": result.full_result_ref,
                    }
                )
            report.append(entry)
    return report
