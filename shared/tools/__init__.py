"""Tools: a typed function or an explicit JSON Schema becomes a `Tool` with its wire name, its
schema and how it runs (`tool.py`, `schema_tool.py`); the context a tool gets (`context.py`); the
registry that finds them (`registry.py`) and the checks on the model's arguments."""

from toolpipe.shared.tools.context import RunState, ToolActions, ToolContext
from toolpipe.shared.tools.names import assign_wire_names, wire_name
from toolpipe.shared.tools.registry import Execution, ToolRegistry, ToolSource, ToolSourceError
from toolpipe.shared.tools.schema_tool import SchemaError, schema_tool
from toolpipe.shared.tools.tool import Param, Tool, clean_schema, to_model_text, tool

__all__ = [
    "Execution",
    "Param",
    "RunState",
    "SchemaError",
    "Tool",
    "ToolActions",
    "ToolContext",
    "ToolRegistry",
    "ToolSource",
    "ToolSourceError",
    "assign_wire_names",
    "clean_schema",
    "schema_tool",
    "to_model_text",
    "tool",
    "wire_name",
]
