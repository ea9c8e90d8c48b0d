"""A plain typed, documented Python function becomes a tool with a JSON schema."""

import asyncio
import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_jsonable_python

from shared.errors import InvalidArgumentsError, ToolExecutionError, describe_validation_error
from shared.tools.docstrings import parse_docstring

# The Chat Completions API rejects function names outside this pattern.
_WIRE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    args_model: type[BaseModel]

    def spec(self) -> dict[str, Any]:
        """The entry for the OpenAI `tools` list."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def parse_arguments(self, arguments: str) -> BaseModel:
        try:
            raw = json.loads(arguments or "{}")
        except json.JSONDecodeError as e:
            raise InvalidArgumentsError(f"Arguments for '{self.name}' are not valid JSON: {e.msg}.") from e
        if not isinstance(raw, dict):
            raise InvalidArgumentsError(f"Arguments for '{self.name}' must be a JSON object.")
        try:
            return self.args_model.model_validate(raw)
        except ValidationError as e:
            details = describe_validation_error(e, "(arguments)")
            raise InvalidArgumentsError(f"Invalid arguments for '{self.name}': {details}.") from e

    def invoke(self, arguments: str) -> str:
        """Validate, run and convert; model-visible failures raise `ModelVisibleError`."""
        args = self.parse_arguments(arguments)
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        try:
            result = self.fn(**kwargs)
            if inspect.isawaitable(result):
                result = asyncio.run(_await(result))
        except Exception as e:
            raise ToolExecutionError(f"Tool '{self.name}' failed: {type(e).__name__}: {e}") from e
        return to_model_text(result)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def to_model_text(result: Any) -> str:
    """What the model reads: None → "Success", str as is, anything else as JSON."""
    if result is None:
        return "Success"
    if isinstance(result, str):
        return result
    return json.dumps(to_jsonable_python(result), ensure_ascii=False)


def _strip_titles(schema: Any) -> Any:
    # pydantic adds a "title" to every property; it is noise in the prompt.
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _build(fn: Callable[..., Any], name: str | None, description: str | None) -> Tool:
    wire_name = name or fn.__name__
    if not _WIRE_NAME.match(wire_name):
        raise ValueError(f"tool name '{wire_name}' must match {_WIRE_NAME.pattern}")
    doc = parse_docstring(fn.__doc__)
    hints = get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ValueError(f"tool '{wire_name}': *args and **kwargs cannot be described to a model")
        if param.name not in hints:
            raise ValueError(f"tool '{wire_name}': parameter '{param.name}' needs a type hint")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints[param.name], Field(default, description=doc.params.get(param.name)))
    model = create_model(f"{wire_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    schema = _strip_titles(model.model_json_schema())
    schema.setdefault("properties", {})
    text = description or doc.description
    if not text:
        raise ValueError(f"tool '{wire_name}' needs a description: give it a docstring")
    return Tool(name=wire_name, description=text, parameters=schema, fn=fn, args_model=model)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None, description: str | None = None
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function into a `Tool`: `@tool` or `@tool(name=..., description=...)`.

    The first paragraph of the docstring is the description the model sees; its `Args:`
    section describes the parameters.
    """
    if fn is not None:
        return _build(fn, name, description)
    return lambda f: _build(f, name, description)
