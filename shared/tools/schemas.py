"""Walking a JSON Schema by its keywords, and the type names accepted in loose schemas.

A schema holds two kinds of things: subschemas (under `properties`, `items`, `anyOf`...) and
data (`default`, `enum`, `const`, `examples`, the names in `required`, and any keyword this
module does not know). Every rewrite of a schema in toolpipe goes through `map_subschemas`,
so it reaches subschemas only: a `default` of `{"type": "sedan"}` or a property named `type`
is data and is never rewritten.
"""

from collections.abc import Callable
from typing import Any

from toolpipe.shared.errors import DefinitionError

# Keywords whose value is one schema (JSON Schema 2020-12, plus draft 4-7 spellings).
_ONE = frozenset(
    {
        "items",
        "additionalItems",
        "additionalProperties",
        "unevaluatedItems",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contains",
        "propertyNames",
        "contentSchema",
    }
)
# Keywords whose value is a list of schemas (`items` too, in its draft 4-7 tuple form).
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
# Keywords whose value maps names (data) to schemas.
_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})

Path = tuple[str | int, ...]
Visit = Callable[[Any, Path], Any]


def map_subschemas(schema: dict[str, Any], visit: Visit, path: Path = ()) -> dict[str, Any]:
    """A copy of `schema` whose direct subschemas are replaced by `visit(subschema, path)`;
    every other value is kept as is (the same object)."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ONE and isinstance(value, dict | bool):
            out[key] = visit(value, (*path, key))
        elif key in _LIST and isinstance(value, list):
            out[key] = [visit(v, (*path, key, i)) for i, v in enumerate(value)]
        elif key in _MAP and isinstance(value, dict):
            out[key] = {name: visit(v, (*path, key, name)) for name, v in value.items()}
        elif key == "dependencies" and isinstance(value, dict):
            # Draft 7: each value is a schema or a list of property names (data).
            out[key] = {
                name: visit(v, (*path, key, name)) if isinstance(v, dict) else v for name, v in value.items()
            }
        else:
            out[key] = value
    return out


def pointer(path: Path) -> str:
    """`properties/n/items`, as jsonschema's own errors name a place; `(root)` for the top."""
    return "/".join(str(p) for p in path) or "(root)"


def admits_null(schema: Any) -> bool:
    """Whether `null` already validates against the schema (without following `$ref`)."""
    if not isinstance(schema, dict):
        return schema is True
    if "const" in schema:
        return schema["const"] is None
    if "enum" in schema and None not in schema["enum"]:
        return False
    kind = schema.get("type")
    if kind is not None:
        return kind == "null" or (isinstance(kind, list) and "null" in kind)
    if "anyOf" in schema or "oneOf" in schema:
        branches = schema.get("anyOf") or schema.get("oneOf") or []
        return any(admits_null(s) for s in branches)
    return "$ref" not in schema and "allOf" not in schema and "not" not in schema


# Type names from other ecosystems (Python, Java, JavaScript, OpenAPI generators), compared
# case-insensitively, and what each stands for. Dates travel as strings with a format.
# Mirrored in the README's "Type names" table.
_TYPE_TABLE: tuple[tuple[str, dict[str, str]], ...] = (
    ("string str text char character", {"type": "string"}),
    ("integer int long short byte biginteger bigint", {"type": "integer"}),
    ("number float double decimal bigdecimal", {"type": "number"}),
    ("boolean bool", {"type": "boolean"}),
    ("object dict map hashmap", {"type": "object"}),
    ("array list arraylist tuple set hashset", {"type": "array"}),
    ("null none", {"type": "null"}),
    ("date localdate", {"type": "string", "format": "date"}),
    (
        "datetime localdatetime offsetdatetime zoneddatetime instant",
        {"type": "string", "format": "date-time"},
    ),
    ("time localtime", {"type": "string", "format": "time"}),
    ("uuid", {"type": "string", "format": "uuid"}),
)
TYPE_NAMES = {name: schema for names, schema in _TYPE_TABLE for name in names.split()}
# "Any type": the schema gets no `type` keyword at all.
ANY_TYPE_NAMES = frozenset({"any", "anything", "mixed"})


class UnknownTypeError(DefinitionError):
    """A `type` in a loose schema that no table entry explains; says where."""


def normalise_types(schema: Any, path: Path = ()) -> Any:
    """Loose type names (`str`, `Integer`, `HashMap`, `LocalDate`...) to JSON Schema types,
    in every subschema and nowhere else."""
    if not isinstance(schema, dict):
        return schema
    out = map_subschemas(schema, normalise_types, path)
    if "type" not in out:
        return out
    value = out["type"]
    written = value if isinstance(value, list) else [value]
    types: list[str] = []
    formats: set[str] = set()
    for name in written:
        if not isinstance(name, str):
            raise UnknownTypeError(f"type must be a string, got {name!r} at {pointer(path)}")
        key = name.strip().lower()
        if key in ANY_TYPE_NAMES:
            del out["type"]  # admits every type: no type keyword at all
            return out
        known = TYPE_NAMES.get(key)
        if known is None:
            raise UnknownTypeError(f"unknown type '{name}' at {pointer(path)}")
        if known["type"] not in types:
            types.append(known["type"])
        if "format" in known:
            formats.add(known["format"])
    if len(formats) > 1:
        raise UnknownTypeError(f"types {written} need different formats at {pointer(path)}")
    out["type"] = types if isinstance(value, list) else types[0]
    if formats and "format" not in out:
        out["format"] = formats.pop()
    return out
