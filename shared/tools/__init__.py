from shared.tools.context import RunState, ToolContext
from shared.tools.registry import Execution, ToolRegistry
from shared.tools.tool import Param, Tool, clean_schema, to_model_text, tool

__all__ = [
    "Execution",
    "Param",
    "RunState",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "clean_schema",
    "to_model_text",
    "tool",
]
