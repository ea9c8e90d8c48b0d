"""Tools from an explicit JSON Schema (a dict, or a JSON/YAML file) plus a handler.

Schemas written for other tool-calling APIs are normalised: type names from Python, Java or
JavaScript (`dict`, `Integer`, `HashMap`, `LocalDate`...) become JSON Schema types (the table
is `schemas.TYPE_NAMES`), in subschemas only, never in data such as `default` or `enum`. A
schema that still is not valid JSON Schema is rejected here, at registration, with the
reason, never at run time. Names the model API would reject are mapped to safe wire names
(`names.py`); the original name stays on the tool.
"""

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolpipe.shared.errors import DefinitionError
from toolpipe.shared.tools.names import wire_name
from toolpipe.shared.tools.schemas import UnknownTypeError, normalise_types
from toolpipe.shared.tools.strict import NotStrictError, strict_schema
from toolpipe.shared.tools.tool import Tool
from toolpipe.shared.tools.validation import json_schema_validator


class SchemaError(DefinitionError):
    """An explicit tool schema that cannot be made valid."""


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
    handler: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool | None = None,
    **options: Any,
) -> Tool:
    """A tool from a JSON Schema. `source` is either the parameters schema itself, or a full
    definition `{"name", "description", "parameters"}` (the OpenAI `function` shape, or the
    same with `input_schema` as other APIs write it). The handler takes the validated
    arguments as one dict, and a `ToolContext` as second parameter if it declares one.
    `strict=True` (or `"strict": true` in the definition) offers the schema in OpenAI's strict
    form and holds the arguments to it. A deferred tool (`deferred="client"` or `"human"`) has
    no handler: its calls are answered from outside."""
    if handler is None:
        if options.get("deferred") is None:
            raise SchemaError("a schema tool needs a handler, unless it is deferred (answered from outside)")
        handler = _never_run
    spec = _load(source)
    if "parameters" in spec or "input_schema" in spec:
        parameters = spec.get("parameters", spec.get("input_schema"))
        name = name or spec.get("name")
        description = description or spec.get("description")
        if strict is None and isinstance(spec.get("strict"), bool):
            strict = spec["strict"]  # an OpenAI function definition that asks for strict mode
    else:
        parameters = spec
    if not name:
        raise SchemaError("a schema tool needs a name (give name= or a 'name' in the definition)")
    if not description:
        raise SchemaError(f"tool '{name}' needs a description")
    if not isinstance(parameters, dict):
        raise SchemaError(f"tool '{name}': parameters must be an object schema")
    try:
        parameters = normalise_types(parameters)
    except UnknownTypeError as e:
        raise SchemaError(f"tool '{name}': {e}") from e
    parameters.setdefault("type", "object")
    if parameters["type"] != "object":
        raise SchemaError(f"tool '{name}': parameters must be of type object, not {parameters['type']}")
    parameters.setdefault("properties", {})
    import jsonschema  # here, not at module level: only schema tools pay for it at cold start

    try:
        jsonschema.validators.validator_for(parameters, default=jsonschema.Draft202012Validator).check_schema(
            parameters
        )
    except jsonschema.SchemaError as e:
        path = "/".join(str(p) for p in e.absolute_path) or "(root)"
        raise SchemaError(f"tool '{name}': invalid JSON Schema at {path}: {e.message}") from e
    if strict:
        try:
            offered = strict_schema(parameters)
        except NotStrictError as e:
            raise SchemaError(f"tool '{name}' cannot be strict: {e}") from e
        validator = json_schema_validator(offered, strict_from=parameters)
    else:
        offered = parameters
        validator = json_schema_validator(parameters)
    takes_context = len(inspect.signature(handler).parameters) >= 2

    def call(arguments: dict[str, Any], ctx: Any = None) -> Any:
        return handler(arguments, ctx) if takes_context else handler(arguments)

    return Tool(
        name=wire_name(name),
        description=str(description),
        parameters=offered,
        fn=_ArgumentsAdapter(call),
        source_name=name,
        validator=validator,
        context_param="ctx" if takes_context else None,
        strict=bool(strict),
        **options,
    )


class _ArgumentsAdapter:
    """Calls `handler(arguments_dict[, ctx])` from the keyword arguments Tool passes."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self._call = call

    def __call__(self, **kwargs: Any) -> Any:
        ctx = kwargs.pop("ctx", None)
        return self._call(kwargs, ctx)


def _never_run(arguments: dict[str, Any], ctx: Any = None) -> Any:
    # A deferred tool's calls wait for an answer from outside; no worker runs them (the worker
    # refuses one that reaches it), so this is never called.
    raise RuntimeError("a deferred tool is answered from outside, never run")
