"""Tools from an explicit JSON Schema (a dict, or a JSON/YAML file) plus a handler.

Schemas written for other tool-calling APIs are normalised (`dict`, `float`, `tuple`,
`any` and friends become JSON Schema types); a schema that still is not valid JSON Schema
is rejected here, at registration, with the reason, never at run time. Names the model API
would reject are mapped to safe wire names; the original name stays on the tool.
"""

import hashlib
import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolpipe.shared.errors import DefinitionError, InvalidArgumentsError
from toolpipe.shared.tools.tool import WIRE_NAME, Tool

_LOOSE_TYPES = {
    "dict": "object", "map": "object", "object": "object",
    "list": "array", "tuple": "array", "set": "array", "array": "array",
    "str": "string", "string": "string", "text": "string",
    "int": "integer", "integer": "integer", "long": "integer",
    "float": "number", "double": "number", "decimal": "number", "number": "number",
    "bool": "boolean", "boolean": "boolean",
    "none": "null", "null": "null",
}  # fmt: skip
_ANY = {"any", "anything", "mixed"}


class SchemaError(DefinitionError):
    """An explicit tool schema that cannot be made valid."""


def wire_name(name: str) -> str:
    """A name the Chat Completions API accepts: [a-zA-Z0-9_-]{1,64}, stable for a given name."""
    if WIRE_NAME.match(name):
        return name
    safe = re.sub(r"[^a-zA-Z0-9_-]+", "_", name).strip("_") or "tool"
    if len(safe) <= 64 and safe != name:
        return safe
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{safe[:55]}_{digest}"


def normalise(schema: Any, where: str = "parameters") -> Any:
    """Loose types to JSON Schema types, recursively; unknown type names are an error."""
    if isinstance(schema, list):
        return [normalise(s, f"{where}[{i}]") for i, s in enumerate(schema)]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            types = value if isinstance(value, list) else [value]
            mapped: list[str] = []
            for t in types:
                if not isinstance(t, str):
                    raise SchemaError(f"{where}: type must be a string, got {t!r}")
                if t.lower() in _ANY:
                    mapped.clear()  # "any" admits every type: no type keyword at all
                    break
                if t.lower() not in _LOOSE_TYPES:
                    raise SchemaError(f"{where}: unknown type '{t}'")
                mapped.append(_LOOSE_TYPES[t.lower()])
            if mapped:
                out["type"] = mapped if isinstance(value, list) else mapped[0]
        elif key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
            out[key] = {name: normalise(sub, f"{where}.{name}") for name, sub in value.items()}
        else:
            out[key] = normalise(value, f"{where}.{key}") if isinstance(value, dict | list) else value
    return out


def _load(source: dict[str, Any] | str | Path) -> dict[str, Any]:
    if isinstance(source, dict):
        return source
    import yaml  # here, not at module level: only schema tools pay for it at cold start

    path = Path(source)
    try:
        text = path.read_text()
    except OSError as e:
        raise SchemaError(f"cannot read tool schema {path}: {e.strerror}") from e
    try:
        loaded = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise SchemaError(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}") from e
    if not isinstance(loaded, dict):
        raise SchemaError(f"{path} must hold one object")
    return loaded


def schema_tool(
    source: dict[str, Any] | str | Path,
    handler: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> Tool:
    """A tool from a JSON Schema. `source` is either the parameters schema itself, or a full
    definition `{"name", "description", "parameters"}` (the OpenAI `function` shape, or the
    same with `input_schema` as other APIs write it). The handler takes the validated
    arguments as one dict, and a `ToolContext` as second parameter if it declares one."""
    spec = _load(source)
    if "parameters" in spec or "input_schema" in spec:
        parameters = spec.get("parameters", spec.get("input_schema"))
        name = name or spec.get("name")
        description = description or spec.get("description")
    else:
        parameters = spec
    if not name:
        raise SchemaError("a schema tool needs a name (give name= or a 'name' in the definition)")
    if not description:
        raise SchemaError(f"tool '{name}' needs a description")
    if not isinstance(parameters, dict):
        raise SchemaError(f"tool '{name}': parameters must be an object schema")
    parameters = normalise(parameters)
    parameters.setdefault("type", "object")
    if parameters["type"] != "object":
        raise SchemaError(f"tool '{name}': parameters must be of type object, not {parameters['type']}")
    parameters.setdefault("properties", {})
    import jsonschema  # here, not at module level: only schema tools pay for it at cold start

    try:
        validator_class = jsonschema.validators.validator_for(
            parameters, default=jsonschema.Draft202012Validator
        )
        validator_class.check_schema(parameters)
    except jsonschema.SchemaError as e:
        path = "/".join(str(p) for p in e.absolute_path) or "(root)"
        raise SchemaError(f"tool '{name}': invalid JSON Schema at {path}: {e.message}") from e
    validator = validator_class(parameters, format_checker=jsonschema.FormatChecker())
    safe = wire_name(name)

    def validate(arguments: dict[str, Any]) -> None:
        try:
            errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        except Exception as e:
            # A schema valid in form that cannot be applied (a `$ref` to nowhere): the call fails,
            # as the tool's own error the model reads, and the run goes on.
            raise InvalidArgumentsError(
                f"The schema of '{safe}' could not be applied to the arguments: {e}."
            ) from e
        if errors:
            details = "; ".join(
                f"{'.'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}" for e in errors
            )
            raise InvalidArgumentsError(f"Invalid arguments for '{safe}': {details}.")

    takes_context = len(inspect.signature(handler).parameters) >= 2

    def call(arguments: dict[str, Any], ctx: Any = None) -> Any:
        return handler(arguments, ctx) if takes_context else handler(arguments)

    return Tool(
        name=safe,
        description=str(description),
        parameters=parameters,
        fn=_ArgumentsAdapter(call),
        source_name=name,
        validator=validate,
        context_param="ctx" if takes_context else None,
        **options,
    )


class _ArgumentsAdapter:
    """Calls `handler(arguments_dict[, ctx])` from the keyword arguments Tool passes."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self._call = call

    def __call__(self, **kwargs: Any) -> Any:
        ctx = kwargs.pop("ctx", None)
        return self._call(kwargs, ctx)
