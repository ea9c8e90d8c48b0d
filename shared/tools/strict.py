"""Opt-in strict tools: schemas in the subset OpenAI's structured outputs accept with
`"strict": true`, and the arguments a model sends against them mapped back.

OpenAI's rules ("Structured model outputs", Supported schemas): the root is an object, never
`anyOf`; every object sets `additionalProperties: false` and lists every property in
`required`; an optional property is emulated by letting it be `null`; `allOf`, `not`,
`if`/`then`/`else`, `dependentRequired` and `dependentSchemas` are refused; strings take
`pattern` and nine formats; numbers `minimum`, `maximum`, their exclusive forms and
`multipleOf`; arrays `minItems`, `maxItems`; `anyOf`, `$defs` and recursion are supported;
at most 5,000 properties and 1,000 enum values. A schema outside that subset is refused here,
when the tool is defined, rather than by the API on the first run.
"""

import json
from typing import Any

from toolpipe.shared.errors import DefinitionError
from toolpipe.shared.tools.schemas import Path, admits_null, map_subschemas, pointer

# What the subset allows on a schema: the constraints above, and annotations.
_ALLOWED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
        "pattern",
        "format",
        "minLength",
        "maxLength",
        "multipleOf",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
        "description",
        "title",
        "default",
        "examples",
        "$comment",
        "$schema",
    }
)
_HINTS = {
    "oneOf": "use anyOf",
    "prefixItems": "a fixed-length tuple: use a list, or an object with named fields",
    "uniqueItems": "a set: use a list",
    "patternProperties": "use named properties",
    "allOf": "merge the schemas into one",
}
FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})
MAX_PROPERTIES = 5_000
MAX_ENUM_VALUES = 1_000
_NULL = {"type": "null"}
_ANNOTATIONS = ("description", "title", "default", "examples")


class NotStrictError(DefinitionError):
    """A schema strict mode cannot express; the message says where and why."""


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The strict form of a tool's parameters schema, or `NotStrictError`."""
    if schema.get("type") != "object" or "anyOf" in schema:
        raise NotStrictError("the parameters must be one object schema, not a union")
    counts = {"properties": 0, "enum": 0}
    strict: dict[str, Any] = _strict(schema, (), counts)
    if counts["properties"] > MAX_PROPERTIES:
        raise NotStrictError(f"{counts['properties']} properties; strict mode allows {MAX_PROPERTIES}")
    if counts["enum"] > MAX_ENUM_VALUES:
        raise NotStrictError(f"{counts['enum']} enum values; strict mode allows {MAX_ENUM_VALUES}")
    return strict


def _strict(node: Any, path: Path, counts: dict[str, int]) -> Any:
    if node is False and path[-1:] == ("additionalProperties",):
        return node  # what strict mode wants there
    if not isinstance(node, dict):
        raise NotStrictError(f"{pointer(path)}: a boolean schema cannot be strict")
    for key in node:
        if key not in _ALLOWED:
            hint = f" ({_HINTS[key]})" if key in _HINTS else ""
            raise NotStrictError(f"{pointer(path)}: '{key}' is not supported in strict mode{hint}")
    if "properties" in node and "type" not in node:
        node = {"type": "object", **node}  # properties without a type: an object, as loose schemas mean
    if not any(k in node for k in ("type", "anyOf", "$ref", "enum", "const")):
        raise NotStrictError(f"{pointer(path)}: a value of any type cannot be strict; give it a type")
    if _is_object(node) and node.get("additionalProperties", False) is not False:
        raise NotStrictError(
            f"{pointer(path)}: an object with free-form keys (additionalProperties) cannot be strict; "
            "name its properties"
        )
    if "format" in node and node["format"] not in FORMATS:
        raise NotStrictError(
            f"{pointer(path)}: format '{node['format']}' is not supported in strict mode "
            f"(supported: {', '.join(sorted(FORMATS))})"
        )
    if isinstance(node.get("items"), list):
        raise NotStrictError(f"{pointer(path)}: tuple-form 'items' is not supported in strict mode")
    counts["enum"] += len(node.get("enum", []))
    out = map_subschemas(node, lambda sub, where: _strict(sub, where, counts), path)
    if _is_object(out):
        out = _strict_object(out, node, path, counts)
    if "default" in out:
        # OpenAI refuses `default` in a strict schema ("'default' is not permitted", 400). The
        # tool still applies it (a null means "left out"); the model reads it in the description.
        value = out.pop("default")
        if value is not None:
            note = f"Default: {json.dumps(value)}."
            out["description"] = f"{out['description']} {note}" if out.get("description") else note
    return out


def _strict_object(out: dict[str, Any], node: dict[str, Any], path: Path, counts: dict[str, int]) -> Any:
    properties: dict[str, Any] = out.get("properties", {})
    if not properties and path:
        raise NotStrictError(f"{pointer(path)}: an object without properties cannot be strict; name them")
    counts["properties"] += len(properties)
    required = set(node.get("required", []))
    out["properties"] = {name: sub if name in required else nullable(sub) for name, sub in properties.items()}
    out["required"] = list(properties)
    out["additionalProperties"] = False
    return out


def _is_object(schema: dict[str, Any]) -> bool:
    kinds = schema.get("type")
    return kinds == "object" or (isinstance(kinds, list) and "object" in kinds)


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema, also admitting null: how strict mode says "may be left out"."""
    if admits_null(schema):
        return schema
    kinds = schema.get("type")
    simple = kinds is not None and not any(k in schema for k in ("const", "$ref", "anyOf"))
    if simple and not _is_object(schema):
        out = dict(schema)
        out["type"] = [*(kinds if isinstance(kinds, list) else [kinds]), "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    annotations = {k: schema[k] for k in _ANNOTATIONS if k in schema}
    inner = {k: v for k, v in schema.items() if k not in annotations}
    if list(inner) == ["anyOf"]:
        return {**annotations, "anyOf": [*inner["anyOf"], _NULL]}
    return {**annotations, "anyOf": [inner, _NULL]}


def drop_strict_nulls(arguments: Any, schema: dict[str, Any]) -> Any:
    """Arguments checked against the strict schema, back in the shape of the original: a null
    sent for a property that was optional and did not admit null means "left out", so the key
    is dropped and the tool gets its default, as when a model omits it without strict mode."""
    return _drop(arguments, schema, schema)


def _resolve(schema: Any, root: dict[str, Any]) -> Any:
    seen: set[str] = set()
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"] not in seen:
        ref = schema["$ref"]
        seen.add(ref)
        target: Any = root
        for part in ref.removeprefix("#").strip("/").split("/") if ref != "#" else []:
            target = target.get(part) if isinstance(target, dict) else None
        if target is None:
            return schema
        schema = target
    return schema


def _drop(value: Any, schema: Any, root: dict[str, Any]) -> Any:
    schema = _resolve(schema, root)
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        properties = schema["properties"]
        required = set(schema.get("required", []))
        kept: dict[str, Any] = {}
        for key, item in value.items():
            sub = properties.get(key)
            if (
                item is None
                and key not in required
                and sub is not None
                and not admits_null(_resolve(sub, root))
            ):
                continue
            kept[key] = _drop(item, sub, root) if sub is not None else item
        return kept
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_drop(item, schema["items"], root) for item in value]
    branches = [b for b in schema.get("anyOf", []) if not admits_null(_resolve(b, root))]
    if value is not None and len(branches) == 1:
        return _drop(value, branches[0], root)
    return value
