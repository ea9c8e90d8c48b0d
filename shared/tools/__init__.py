from toolpipe.shared.tools.context import RunState, ToolContext
from toolpipe.shared.tools.registry import Execution, ToolRegistry, ToolSource, ToolSourceError
from toolpipe.shared.tools.schema_tool import SchemaError, schema_tool, wire_name
from toolpipe.shared.tools.tool import Param, Tool, clean_schema, to_model_text, tool

__all__ = [
    "Execution",
    "Param",
    "RunState",
    "SchemaError",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "ToolSource",
    "ToolSourceError",
    "clean_schema",
    "schema_tool",
    "to_model_text",
    "tool",
    "wire_name",
]
