"""Tool definitions from other catalogues (issue 10, item 5): wire names that meet, values left
alone by normalising, Java/JavaScript type names, and opt-in strict schemas."""

import hashlib
import json
import time
from typing import Annotated, Any, Optional

import pytest
from pydantic import BaseModel, Field

from toolpipe.infra.local.scripted_model import Reply, ScriptedModelServer, ScriptResponder
from toolpipe.shared.agents import Agent, agent_tool
from toolpipe.shared.errors import DefinitionError
from toolpipe.shared.messages import ToolCall
from toolpipe.shared.model.openai_client import OpenAIModelClient, build_openai_client
from toolpipe.shared.tools import SchemaError, Tool, ToolRegistry, schema_tool, tool
from toolpipe.shared.tools.errors import InvalidArgumentsError


def _named(name: str) -> Tool:
    return schema_tool({"properties": {}}, lambda args: f"ran {name}", name=name, description=f"{name}.")


def _hashed(prefix: str, original: str) -> str:
    return f"{prefix}_{hashlib.sha256(original.encode()).hexdigest()[:8]}"


def _run(registry: ToolRegistry, name: str, arguments: str = "{}") -> str:
    return registry.execute(ToolCall(id="c", name=name, arguments=arguments)).content


# --- wire names ---------------------------------------------------------------------------


def test_two_names_that_map_to_one_wire_name_are_both_offered_whatever_the_order() -> None:
    dotted, underscored = _named("flight.book"), _named("flight_book")
    for tools in ([dotted, underscored], [underscored, dotted]):
        registry = ToolRegistry(tools)
        # The name the API accepts as written keeps it; the replaced one is told apart by a hash.
        assert sorted(registry.names) == ["flight_book", _hashed("flight_book", "flight.book")]
        assert _run(registry, "flight_book") == "ran flight_book"
        assert _run(registry, _hashed("flight_book", "flight.book")) == "ran flight.book"
        assert _run(registry, "flight.book") == "ran flight.book"  # a model echoing the original


def test_replaced_names_that_meet_each_other_are_all_hashed() -> None:
    registry = ToolRegistry([_named("flight.book"), _named("flight book"), _named("hotel.book")])
    assert sorted(registry.names) == sorted(
        [_hashed("flight_book", "flight.book"), _hashed("flight_book", "flight book"), "hotel_book"]
    )
    assert _run(registry, "flight book") == "ran flight book"
    with pytest.raises(DefinitionError, match=r"two tools are named 'flight\.book'"):
        ToolRegistry([_named("flight.book"), _named("flight.book")])


class _Source:
    """A tool source (as an MCP server is) whose names meet the agent's own."""

    name = "remote"

    def tools(self) -> list[Tool]:
        return [_named("flight_book"), _named("search")]

    def resolve(self, name: str) -> Tool | None:
        return next((t for t in self.tools() if name in (t.name, t.source_name)), None)


def test_agent_tools_and_source_tools_meeting_a_name_are_both_offered() -> None:
    agent = Agent(
        name="travel",
        instructions="Travel.",
        tools=[agent_tool("assistant", name="flight_book"), _named("flight.book")],
        tool_sources=[_Source()],
    )
    registry = agent.registry
    names = registry.names
    # The agent's own tools keep their names; the source's colliding tool is hashed.
    assert names[:2] == ["flight_book", _hashed("flight_book", "flight.book")]
    assert sorted(names[2:]) == sorted([_hashed("flight_book", "flight_book"), "search"])
    assert len(set(names)) == len(names) == len(registry.specs())
    assert registry.get("flight_book").child_agent == "assistant"
    assert _run(registry, _hashed("flight_book", "flight.book")) == "ran flight.book"
    assert _run(registry, _hashed("flight_book", "flight_book")) == "ran flight_book"
    assert _run(registry, "search") == "ran search"


def test_an_error_names_the_tool_by_its_wire_name() -> None:
    strict_number = schema_tool(
        {"properties": {"n": {"type": "integer"}}, "required": ["n"]},
        lambda args: "ran",
        name="count.up",
        description="Count.",
    )
    registry = ToolRegistry([strict_number, _named("count_up")])
    assert _run(registry, _hashed("count_up", "count.up"), '{"n": "x"}') == (
        f"Error: Invalid arguments for '{_hashed('count_up', 'count.up')}': n: 'x' is not of type 'integer'."
    )


# --- normalising touches keywords, never values -------------------------------------------


def test_values_pass_normalising_untouched() -> None:
    parameters = {
        "properties": {
            "car": {
                "type": "Object",
                "properties": {"type": {"type": "String"}, "properties": {"type": "int"}},
                "default": {"type": "sedan"},
                "examples": [{"type": "coupe", "properties": "leather"}],
            },
            "shape": {"enum": [{"type": "square"}, "round"], "const": {"type": "square"}},
            "dependencies": {"type": "Map", "properties": {"items": {"type": "List"}}},
        },
        "required": ["type"],
        "x-catalogue": {"type": "decimal"},
    }
    garage = schema_tool(parameters, lambda args: args, name="garage", description="Park.")
    car = garage.parameters["properties"]["car"]
    assert car == {
        "type": "object",
        "properties": {"type": {"type": "string"}, "properties": {"type": "integer"}},
        "default": {"type": "sedan"},
        "examples": [{"type": "coupe", "properties": "leather"}],
    }
    assert garage.parameters["properties"]["shape"] == parameters["properties"]["shape"]
    assert garage.parameters["properties"]["dependencies"]["properties"] == {"items": {"type": "array"}}
    assert garage.parameters["required"] == ["type"]
    assert garage.parameters["x-catalogue"] == {"type": "decimal"}


class Honorific(BaseModel):
    title: str


DOCTOR = Honorific(title="Dr")


def test_a_decorated_tools_defaults_keep_their_title_and_ref_keys() -> None:
    @tool
    def greet(
        name: str,
        honorific: Honorific = DOCTOR,
        note: Annotated[dict[str, str], Field(examples=[{"title": "x", "$ref": "#/$defs/Honorific"}])] = {},  # noqa: B006
    ) -> str:
        """Greet someone."""
        return f"{honorific.title} {name}"

    properties = greet.parameters["properties"]
    assert properties["honorific"]["default"] == {"title": "Dr"}
    assert properties["honorific"]["properties"] == {"title": {"type": "string"}}  # a name, kept
    assert properties["note"]["examples"] == [{"title": "x", "$ref": "#/$defs/Honorific"}]
    assert greet.invoke('{"name": "Who"}') == "Dr Who"


# --- Java / JavaScript type names ---------------------------------------------------------


_WRITTEN = (
    ("String char Character CHAR", {"type": "string"}),
    ("Integer int Long long Short short Byte byte BigInteger", {"type": "integer"}),
    ("Double double Float float BigDecimal Number", {"type": "number"}),
    ("Boolean bool", {"type": "boolean"}),
    ("List ArrayList Array Set HashSet", {"type": "array"}),
    ("Map HashMap Object", {"type": "object"}),
    ("Date LocalDate", {"type": "string", "format": "date"}),
    ("DateTime LocalDateTime Instant", {"type": "string", "format": "date-time"}),
)
JAVA_AND_JAVASCRIPT = {name: schema for names, schema in _WRITTEN for name in names.split()}


def test_java_and_javascript_type_names_are_accepted() -> None:
    properties = {f"p{i}": {"type": name} for i, name in enumerate(JAVA_AND_JAVASCRIPT)}
    properties |= {"nullable": {"type": ["Integer", "null"]}, "day": {"type": ["LocalDate", "None"]}}
    loaded = schema_tool({"properties": properties}, print, name="t", description="T.")
    assert loaded.parameters["properties"] == {
        **{f"p{i}": schema for i, schema in enumerate(JAVA_AND_JAVASCRIPT.values())},
        "nullable": {"type": ["integer", "null"]},
        "day": {"type": ["string", "null"], "format": "date"},
    }


def test_a_date_argument_is_checked_against_its_format() -> None:
    loaded = schema_tool(
        {"properties": {"day": {"type": "LocalDate"}}}, lambda a: a["day"], name="d", description="D."
    )
    assert loaded.invoke('{"day": "2026-11-23"}') == "2026-11-23"
    with pytest.raises(InvalidArgumentsError, match="is not a 'date'"):
        loaded.invoke('{"day": "tomorrow"}')


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"properties": {"n": {"type": "Quaternion"}}},
            "tool 'vec': unknown type 'Quaternion' at properties/n",
        ),
        (
            {"properties": {"n": {"type": "array", "items": {"type": "List<String>"}}}},
            "tool 'vec': unknown type 'List<String>' at properties/n/items",
        ),
        ({"properties": {"n": {"type": ["Date", "DateTime"]}}}, "need different formats at properties/n"),
    ],
)
def test_unknown_type_names_are_refused_naming_the_tool_and_the_place(parameters: Any, message: str) -> None:
    with pytest.raises(SchemaError, match=message.replace("[", r"\[")):
        schema_tool(parameters, print, name="vec", description="Vec.")


# --- strict mode --------------------------------------------------------------------------


class Stop(BaseModel):
    city: str
    nights: int = 1


def test_a_strict_decorated_tool_offers_an_openai_strict_schema_and_holds_arguments_to_it() -> None:
    @tool(strict=True)
    def plan(
        destination: str,
        stops: list[Stop],
        budget: Optional[float],  # noqa: UP045 - the spelling users write
        travellers: int = 2,
    ) -> str:
        """Plan a trip.

        Args:
            destination: Where to.
        """
        nights = sum(s.nights for s in stops)
        return f"{destination}: {nights} nights, {travellers} travellers, budget {budget}"

    function = plan.spec()["function"]
    assert function["strict"] is True
    assert function["parameters"] == {
        "additionalProperties": False,
        "properties": {
            "destination": {"description": "Where to.", "type": "string"},
            "stops": {
                "items": {
                    "additionalProperties": False,
                    "properties": {
                        "city": {"type": "string"},
                        "nights": {"description": "Default: 1.", "type": ["integer", "null"]},
                    },
                    "required": ["city", "nights"],
                    "type": "object",
                },
                "type": "array",
            },
            "budget": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "travellers": {"description": "Default: 2.", "type": ["integer", "null"]},
        },
        "required": ["destination", "stops", "budget", "travellers"],
        "type": "object",
    }
    # OpenAI refuses `default` in a strict schema (400 "'default' is not permitted"): the
    # model reads it in the description, and the tool applies it to a null.
    assert '"default"' not in json.dumps(function["parameters"])
    # Null for what was optional means "left out": the tool gets its defaults.
    sent = {
        "destination": "Oslo",
        "stops": [{"city": "Bergen", "nights": None}],
        "budget": None,
        "travellers": None,
    }
    assert plan.invoke(json.dumps(sent)) == "Oslo: 1 nights, 2 travellers, budget None"
    # Held to the strict schema: every key, and no coercion of "3" into a number.
    with pytest.raises(InvalidArgumentsError, match=r"'travellers' is a required property"):
        plan.invoke('{"destination": "Oslo", "stops": [], "budget": null}')
    with pytest.raises(
        InvalidArgumentsError, match=r"budget: '3' is not valid under any of the given schemas"
    ):
        plan.invoke('{"destination": "Oslo", "stops": [], "budget": "3", "travellers": 1}')


def test_a_strict_schema_tool_and_an_openai_definition_that_asks_for_strict() -> None:
    definition = {
        "name": "get_weather",
        "description": "Weather.",
        "strict": True,
        "parameters": {
            "properties": {"city": {"type": "String"}, "unit": {"type": "string", "enum": ["C", "F"]}},
            "required": ["city"],
        },
    }
    weather = schema_tool(definition, lambda args: args)
    function = weather.spec()["function"]
    assert function["strict"] is True
    assert function["parameters"] == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": ["string", "null"], "enum": ["C", "F", None]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    }
    assert weather.invoke('{"city": "Oslo", "unit": null}') == '{"city": "Oslo"}'
    with pytest.raises(InvalidArgumentsError, match="Additional properties are not allowed"):
        weather.invoke('{"city": "Oslo", "unit": "C", "wind": 1}')
    assert "strict" not in schema_tool({**definition, "strict": False}, print).spec()["function"]


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"properties": {"tags": {"type": "object"}}}, "properties/tags: an object without properties"),
        (
            {"properties": {"a": {"type": "object", "properties": {}, "additionalProperties": True}}},
            "properties/a: an object with free-form keys",
        ),
        ({"properties": {"a": {"description": "Anything."}}}, "properties/a: a value of any type"),
        ({"properties": {"a": {"allOf": [{"type": "string"}]}}}, "'allOf' is not supported in strict mode"),
        (
            {"properties": {"a": {"oneOf": [{"type": "string"}]}}},
            "'oneOf' is not supported in strict mode (use anyOf)",
        ),
        ({"properties": {"a": {"type": "string", "format": "uri"}}}, "format 'uri' is not supported"),
        (
            {"properties": {"a": {"type": "array", "uniqueItems": True}}},
            "'uniqueItems' is not supported in strict mode (a set: use a list)",
        ),
        ({"properties": {"a": {"type": "string"}}, "patternProperties": {}}, "(root): 'patternProperties'"),
    ],
)
def test_schemas_strict_mode_cannot_express_are_refused_at_definition(parameters: Any, message: str) -> None:
    with pytest.raises(SchemaError, match=r"^tool 'x' cannot be strict: ") as refused:
        schema_tool(parameters, print, name="x", description="X.", strict=True)
    assert message in str(refused.value)


def test_decorated_tools_strict_mode_cannot_express_are_refused_at_definition() -> None:
    def tag(labels: dict[str, str]) -> None:
        """Tag."""

    def pair(point: tuple[int, int]) -> None:
        """Pair."""

    with pytest.raises(
        DefinitionError, match="tool 'tag' cannot be strict: properties/labels: an object with free-form keys"
    ):
        tool(strict=True)(tag)
    with pytest.raises(DefinitionError, match=r"properties/point: 'prefixItems' .* \(a fixed-length tuple"):
        tool(strict=True)(pair)
    assert not tool(tag).strict and not tool(pair).strict  # fine without strict


# --- what the model is sent, and what comes back ------------------------------------------


def test_the_model_is_offered_distinct_names_and_strict_specs_and_its_calls_reach_the_right_tools() -> None:
    @tool(strict=True)
    def flight_book(seat: str | None = None, bags: int = 0) -> str:
        """Book a flight."""
        return f"booked seat {seat}, {bags} bag(s)"

    dotted = _named("flight.book")
    registry = ToolRegistry([dotted, flight_book])
    hashed = _hashed("flight_book", "flight.book")
    script = ScriptResponder(
        [Reply(tool_calls=[("flight_book", {"seat": "12A", "bags": None}), (hashed, {})])]
    )
    with ScriptedModelServer(script) as server:
        client = OpenAIModelClient(build_openai_client(server.base_url, "k"))
        try:
            reply = client.complete(
                model="m",
                messages=[{"role": "user", "content": "Book it."}],
                tools=registry.specs(),
                deadline=time.monotonic() + 30,
            )
        finally:
            client.close()
        offered = server.requests[0]["tools"]

    assert [(t["function"]["name"], t["function"].get("strict")) for t in offered] == [
        (hashed, None),
        ("flight_book", True),
    ]
    assert offered[1]["function"]["parameters"]["required"] == ["seat", "bags"]
    assert [registry.execute(call).content for call in reply.tool_calls] == [
        "booked seat 12A, 0 bag(s)",
        "ran flight.book",
    ]
