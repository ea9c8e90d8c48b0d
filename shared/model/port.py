"""The model port: what a model step needs from any chat model, with no SDK imported.

Only the orchestrator imports the `openai` adapter (`shared.model.openai_client`); the
other functions ship without the openai package.
"""

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolpipe.shared.messages import HistoryItem, ToolCall


@dataclass(frozen=True)
class ModelReply:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # What the server said of its answer, for the model call's span: why it stopped
    # (`stop`, `tool_calls`, `length`...) and the model that answered. None when not sent.
    finish_reason: str | None = None
    response_model: str | None = None


class ModelClient(Protocol):
    def complete(
        self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], deadline: float
    ) -> ModelReply: ...


# The Chat Completions API refuses function names outside this pattern, in the history too.
_WIRE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _echo(name: str) -> str:
    """The model's own call, as it is sent back: a name the API would refuse (empty, dotted,
    huge) would fail the whole next request, so it is replaced; its result says what was wrong."""
    return name if _WIRE_NAME.match(name) else "invalid_tool_name"


def to_openai_messages(system_prompt: str, history: list[HistoryItem]) -> list[dict[str, Any]]:
    """Render history items as Chat Completions messages."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    for item in history:
        if item.kind == "user":
            messages.append({"role": "user", "content": item.content})
        elif item.kind == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": item.content}
            if item.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": _echo(c.name), "arguments": c.arguments},
                    }
                    for c in item.tool_calls
                ]
            messages.append(message)
        else:
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.content})
    return messages
