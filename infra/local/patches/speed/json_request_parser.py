"""moto's JSON request parser looks each shape's members and methods up once.

moto: each JSON request is parsed against its shapes, and for every structure (each DynamoDB
attribute value is one) every member's wire name was looked up again and the parse method
chosen by building its name.

Why it matters: a DynamoDB request has a structure per attribute value.

The patch: members are kept on the shape and methods per parser class (neither changes).
"""

from typing import Any

from moto.core.parse import BaseJSONParser

CHECKED_WITH = ("5.2.5",)

_moto_parse_structure = BaseJSONParser._parse_structure
_moto_parse_shape = BaseJSONParser._parse_shape


def _members(shape: Any) -> tuple[tuple[str, str, Any], ...]:
    """A structure's members with their wire names, kept on the shape (shapes do not change)."""
    members: tuple[tuple[str, str, Any], ...] | None = shape.__dict__.get("_toolpipe_members")
    if members is None:
        members = tuple(
            (name, member.serialization.get("name", name), member) for name, member in shape.members.items()
        )
        shape.__dict__["_toolpipe_members"] = members
    return members


def _parse_json_structure(self: BaseJSONParser, shape: Any, value: Any) -> Any:
    if shape.is_document_type:
        return value
    if value is None:
        return None  # as moto's: a JSON null stays None, not an empty structure
    parsed = self.MAP_TYPE()
    for name, wire_name, member in _members(shape):
        raw = value.get(wire_name)
        if raw is not None:
            parsed[name] = self._parse_shape(member, raw)  # type: ignore[no-untyped-call]
    return parsed


def _parse_json_shape(self: BaseJSONParser, shape: Any, node: Any) -> Any:
    parsers: dict[str, Any] | None = type(self).__dict__.get("_toolpipe_parsers")
    if parsers is None:
        parsers = {}
        type(self)._toolpipe_parsers = parsers  # type: ignore[attr-defined]  # one table per parser class
    parse = parsers.get(shape.type_name)
    if parse is None:
        parse = parsers[shape.type_name] = getattr(
            type(self), f"_parse_{shape.type_name}", type(self)._default_handle
        )
    return parse(self, shape, node)


def install() -> None:
    BaseJSONParser._parse_structure = _parse_json_structure  # type: ignore[method-assign]
    BaseJSONParser._parse_shape = _parse_json_shape  # type: ignore[method-assign, assignment]
