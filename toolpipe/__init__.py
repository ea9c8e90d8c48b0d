"""toolpipe: LLM tool calling as a durable, serverless pipeline on AWS.

What your own code imports::

    from toolpipe import Agent, ToolContext, schema_tool, tool
    from toolpipe.cdk import ToolPipeline

Everything under `toolpipe.shared`, `toolpipe.functions` and `toolpipe.infra` is internal and
may change. The names are loaded on first use: every Lambda imports this package first (it is
the parent of its handler's module), so a cold start pays only for what its handler uses.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolpipe.shared.agents import (
        AfterModel,
        AfterTool,
        Agent,
        BeforeModel,
        BeforeTool,
        Handoff,
        HandoffContext,
        Hooks,
        ModelPrice,
        agent_tool,
        remove_tool_calls,
    )
    from toolpipe.shared.errors import DefinitionError
    from toolpipe.shared.mcp import McpServer
    from toolpipe.shared.tools import Param, SchemaError, ToolActions, ToolContext, schema_tool, tool

_WHERE = {
    "AfterModel": "toolpipe.shared.agents",
    "AfterTool": "toolpipe.shared.agents",
    "Agent": "toolpipe.shared.agents",
    "BeforeModel": "toolpipe.shared.agents",
    "BeforeTool": "toolpipe.shared.agents",
    "Handoff": "toolpipe.shared.agents",
    "HandoffContext": "toolpipe.shared.agents",
    "Hooks": "toolpipe.shared.agents",
    "ModelPrice": "toolpipe.shared.agents",
    "agent_tool": "toolpipe.shared.agents",
    "remove_tool_calls": "toolpipe.shared.agents",
    "DefinitionError": "toolpipe.shared.errors",
    "McpServer": "toolpipe.shared.mcp",
    "Param": "toolpipe.shared.tools",
    "SchemaError": "toolpipe.shared.tools",
    "ToolActions": "toolpipe.shared.tools",
    "ToolContext": "toolpipe.shared.tools",
    "schema_tool": "toolpipe.shared.tools",
    "tool": "toolpipe.shared.tools",
}

__all__ = [
    "AfterModel",
    "AfterTool",
    "Agent",
    "BeforeModel",
    "BeforeTool",
    "DefinitionError",
    "Handoff",
    "HandoffContext",
    "Hooks",
    "McpServer",
    "ModelPrice",
    "Param",
    "SchemaError",
    "ToolActions",
    "ToolContext",
    "agent_tool",
    "remove_tool_calls",
    "schema_tool",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'toolpipe' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
