from shared.tools.registry import Execution, ToolRegistry
from shared.tools.tool import Tool, to_model_text, tool

__all__ = ["Execution", "Tool", "ToolRegistry", "to_model_text", "tool"]
