"""Tools from explicit JSON Schema (issue #3, item 2): pinned, normalised, rejected early."""

import json
from pathlib import Path
from typing import Any

import pytest

from toolpipe.shared.messages import ToolCall
from toolpipe.shared.tools import SchemaError, ToolContext, ToolRegistry, schema_tool, wire_name
from toolpipe.shared.tools.errors import InvalidArgumentsError

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["C", "F"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
}


def _echo(arguments: dict[str, Any]) -> dict[str, Any]:
    return arguments


def test_openai_function_definition_is_used_as_is() -> None:
    weather = schema_tool(WEATHER, _echo)
    assert weather.spec() == {"type": "function", "function": WEATHER}
    assert weather.invoke('{"city": "Oslo", "unit": "C"}') == '{"city": "Oslo", "unit": "C"}'


def test_arguments_are_validated_against_the_schema() -> None:
    weather = schema_tool(WEATHER, _echo)
    with pytest.raises(InvalidArgumentsError) as error:
        weather.invoke('{"unit": "K", "wind": 3}')
    assert str(error.value) == (
        "Invalid arguments for 'get_weather': (arguments): 'city' is a required property; "
        "(arguments): Additional properties are not allowed ('wind' was unexpected); "
        "unit: 'K' is not one of ['C', 'F']."
    )


def test_loose_types_from_other_apis_are_normalised() -> None:
    loose = {
        "properties": {
            "filters": {"type": "dict"},
            "ratio": {"type": "float"},
            "point": {"type": "tuple", "items": {"type": "int"}},
            "anything": {"type": "any", "description": "Whatever you like"},
            "flags": {"type": ["str", "None"]},
        },
    }
    search = schema_tool(loose, _echo, name="search", description="Search.")
    assert search.parameters == {
        "type": "object",
        "properties": {
            "filters": {"type": "object"},
            "ratio": {"type": "number"},
            "point": {"type": "array", "items": {"type": "integer"}},
            "anything": {"description": "Whatever you like"},
            "flags": {"type": ["string", "null"]},
        },
    }
    assert search.invoke('{"point": [1, 2], "anything": [null]}') == '{"point": [1, 2], "anything": [null]}'


def test_anthropic_style_input_schema_and_files(tmp_path: Path) -> None:
    definition = {
        "name": "lookup",
        "description": "Look up.",
        "input_schema": {"properties": {"q": {"type": "str"}}},
    }
    (tmp_path / "lookup.json").write_text(json.dumps(definition))
    (tmp_path / "lookup.yaml").write_text(
        "name: lookup\ndescription: Look up.\ninput_schema:\n  properties:\n    q:\n      type: str\n"
    )
    from_json = schema_tool(tmp_path / "lookup.json", _echo)
    from_yaml = schema_tool(str(tmp_path / "lookup.yaml"), _echo)
    assert (
        from_json.spec()
        == from_yaml.spec()
        == {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look up.",
                "parameters": {"properties": {"q": {"type": "string"}}, "type": "object"},
            },
        }
    )


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            {"properties": {"x": {"items": {"type": "quaternion"}}}},
            "^tool 'bad': unknown type 'quaternion' at properties/x/items$",
        ),
        ({"type": "array"}, "parameters must be of type object, not array"),
        (
            {"properties": {"x": {"type": "string", "minLength": "three"}}},
            "invalid JSON Schema at properties/x/minLength",
        ),
        ({"properties": {"x": {"type": "string"}}, "required": "x"}, "invalid JSON Schema at required"),
    ],
)
def test_schemas_that_cannot_be_made_valid_are_rejected_at_registration(source: Any, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        schema_tool(source, _echo, name="bad", description="Bad.")


def test_unreadable_files_are_rejected_with_their_path(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(SchemaError, match=r"broken\.yaml is not valid YAML"):
        schema_tool(tmp_path / "broken.yaml", _echo)
    with pytest.raises(SchemaError, match="cannot read tool schema"):
        schema_tool(tmp_path / "missing.json", _echo)


@pytest.mark.parametrize(
    ("name", "wire"),
    [
        ("get_weather", "get_weather"),
        ("crm.customers.lookup", "crm_customers_lookup"),
        ("send email now", "send_email_now"),
        ("x" * 70, "x" * 55 + "_" + __import__("hashlib").sha256(("x" * 70).encode()).hexdigest()[:8]),
    ],
)
def test_names_the_api_would_reject_get_safe_wire_names(name: str, wire: str) -> None:
    assert wire_name(name) == wire
    assert len(wire) <= 64


def test_the_original_name_maps_back_to_the_tool() -> None:
    crm = schema_tool(
        {"properties": {}}, lambda args: "found", name="crm.customers.lookup", description="Find."
    )
    registry = ToolRegistry([crm])
    assert registry.specs()[0]["function"]["name"] == "crm_customers_lookup"
    assert crm.source_name == "crm.customers.lookup"
    for called in ("crm_customers_lookup", "crm.customers.lookup"):
        assert registry.execute(ToolCall(id="1", name=called, arguments="{}")).content == "found"


def test_a_handler_can_take_the_context() -> None:
    whoami = schema_tool({"properties": {}}, lambda args, ctx: ctx.caller, name="whoami", description="Who.")
    assert whoami.invoke("{}", ToolContext(run_id="r", agent="a", call_id="c", caller="ana")) == "ana"


def test_a_schema_that_cannot_be_applied_is_an_error_the_model_reads() -> None:
    from toolpipe.shared.tools.errors import InvalidArgumentsError

    weird = schema_tool(
        {"properties": {"x": {"$ref": "#/nope"}}}, lambda args: "ran", name="weird", description="Weird."
    )
    with pytest.raises(InvalidArgumentsError, match="could not be applied"):
        weird.invoke('{"x": 1}')
