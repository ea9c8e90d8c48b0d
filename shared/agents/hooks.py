"""Callbacks around model and tool calls. Subclass `Hooks`, override what you need, and
give instances to `Agent(hooks=[...])`; they run in order, each seeing the previous one's
changes. Model hooks run in the orchestrator, tool hooks in the tool worker."""

from dataclasses import dataclass, field
from typing import Any

from toolpipe.shared.messages import ToolCall
from toolpipe.shared.model.port import ModelReply
from toolpipe.shared.tools.context import ToolContext
from toolpipe.shared.tools.registry import Execution


@dataclass
class BeforeModel:
    run_id: str
    agent: str
    messages: list[dict[str, Any]]  # edit in place or replace
    tools: list[dict[str, Any]]
    reply: ModelReply | None = None  # set it to answer without calling the model


@dataclass
class AfterModel:
    run_id: str
    agent: str
    reply: ModelReply  # replace it to change what is stored and acted on


@dataclass
class BeforeTool:
    run_id: str
    agent: str
    call: ToolCall  # replace it to change the arguments
    context: ToolContext
    blocked: str | None = None  # a reason: the call is not run and the model reads the reason
    result: str | None = None  # an answer: the call is not run and the model reads this


@dataclass
class AfterTool:
    run_id: str
    agent: str
    call: ToolCall
    execution: Execution  # replace it to rewrite the result


@dataclass
class Hooks:
    """No-op callbacks; override the ones you need."""

    name: str = field(default="hooks")

    def before_model(self, event: BeforeModel) -> None:
        return None

    def after_model(self, event: AfterModel) -> None:
        return None

    def before_tool(self, event: BeforeTool) -> None:
        return None

    def after_tool(self, event: AfterTool) -> None:
        return None
