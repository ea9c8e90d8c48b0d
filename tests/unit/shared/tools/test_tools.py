"""Tools from typed functions: pinned schemas, validation, conversion, failures."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from assistant.agents import get_current_date_time, set_alarm, square_root
from assistant.agents import sum as sum_tool
from pydantic import BaseModel

from toolpipe.shared.messages import ToolCall
from toolpipe.shared.tools import ToolRegistry, tool
from toolpipe.shared.tools.errors import InvalidArgumentsError, ToolExecutionError, UnknownToolError


def test_example_tool_schemas_are_pinned() -> None:
    assert [t.spec() for t in (sum_tool, square_root, get_current_date_time, set_alarm)] == [
        {
            "type": "function",
            "function": {
                "name": "sum",
                "description": "Add two numbers.",
                "parameters": {
                    "additionalProperties": False,
                    "properties": {
                        "a": {"description": "The first number.", "type": "number"},
                        "b": {"description": "The second number.", "type": "number"},
                    },
                    "required": ["a", "b"],
                    "type": "object",
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "square_root",
                "description": "Compute the square root of a number.",
                "parameters": {
                    "additionalProperties": False,
                    "properties": {
                        "x": {"description": "The number; must be zero or positive.", "type": "number"}
                    },
                    "required": ["x"],
                    "type": "object",
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "get_current_date_time",
                "description": "Get the current date and time in the user's time zone, as ISO-8601.",
                "parameters": {
                    "additionalProperties": False,
                    "properties": {
                        "timezone": {
                            "default": "UTC",
                            "description": "The user's IANA time zone, for example Europe/Paris.",
                            "type": "string",
                        }
                    },
                    "type": "object",
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "set_alarm",
                "description": "Set an alarm at the given time.",
                "parameters": {
                    "additionalProperties": False,
                    "properties": {
                        "time": {
                            "description": "When the alarm rings, as ISO-8601 with a UTC offset, for example "
                            "2026-11-23T07:30:00+01:00.",
                            "format": "date-time",
                            "type": "string",
                        }
                    },
                    "required": ["time"],
                    "type": "object",
                },
            },
        },
    ]


def test_square_root_of_the_demo_number() -> None:
    assert square_root.invoke('{"x": 475695037565}').startswith("689706.486532")


def test_arguments_are_coerced_and_validated() -> None:
    assert sum_tool.invoke('{"a": "2", "b": 3}') == "5.0"
    with pytest.raises(InvalidArgumentsError, match=r"Invalid arguments for 'sum': b: Field required"):
        sum_tool.invoke('{"a": 1}')
    with pytest.raises(InvalidArgumentsError, match=r"c: Extra inputs are not permitted"):
        sum_tool.invoke('{"a": 1, "b": 2, "c": 3}')
    with pytest.raises(InvalidArgumentsError, match=r"are not valid JSON"):
        sum_tool.invoke('{"a": 1,')
    with pytest.raises(InvalidArgumentsError, match=r"must be a JSON object"):
        sum_tool.invoke("[1, 2]")


def test_a_tool_exception_carries_its_message() -> None:
    with pytest.raises(
        ToolExecutionError, match=r"ValueError: cannot take the square root of a negative number"
    ):
        square_root.invoke('{"x": -1}')


def test_set_alarm_wants_an_offset_and_the_future() -> None:
    assert (
        set_alarm.invoke('{"time": "2999-01-01T07:30:00+01:00"}')
        == "Alarm set for 2999-01-01T07:30:00+01:00."
    )
    with pytest.raises(ToolExecutionError, match="needs a UTC offset"):
        set_alarm.invoke('{"time": "2999-01-01T07:30:00"}')
    with pytest.raises(ToolExecutionError, match="is in the past"):
        set_alarm.invoke('{"time": "2000-01-01T07:30:00+00:00"}')
    with pytest.raises(InvalidArgumentsError, match="time: Input should be a valid datetime"):
        set_alarm.invoke('{"time": "tomorrow"}')


class Point(BaseModel):
    x: int
    y: int


@dataclass
class Box:
    label: str


@pytest.mark.parametrize(
    ("result", "text"),
    [
        (None, "Success"),
        ("as is", "as is"),
        (3, "3"),
        (True, "true"),
        ({"a": [1, 2]}, '{"a": [1, 2]}'),
        (Point(x=1, y=2), '{"x": 1, "y": 2}'),
        (Box(label="é"), '{"label": "é"}'),
        (datetime(2026, 1, 2, 3, 4, 5), '"2026-01-02T03:04:05"'),
    ],
)
def test_results_are_converted_for_the_model(result: Any, text: str) -> None:
    @tool
    def give() -> Any:
        """Give the result."""
        return result

    assert give.invoke("{}") == text


def test_async_tools_run() -> None:
    @tool
    async def later(n: int) -> int:
        """Return n later.

        Args:
            n: A number.
        """
        return n * 2

    assert later.invoke('{"n": 21}') == "42"


def test_name_and_description_can_be_overridden() -> None:
    @tool(name="lookup_customer", description="Find a customer by email.")
    def find(email: str) -> str:
        """Internal docstring."""
        return email

    assert find.spec()["function"]["name"] == "lookup_customer"
    assert find.spec()["function"]["description"] == "Find a customer by email."


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(x):\n    '''Doc.'''\n", "parameter 'x' needs a type hint"),
        ("def f(x: int):\n    pass\n", "needs a description"),
        ("def f(*args: int):\n    '''Doc.'''\n", "cannot be described to a model"),
    ],
)
def test_functions_that_cannot_be_tools_are_rejected_at_definition(source: str, message: str) -> None:
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    with pytest.raises(ValueError, match=message):
        tool(namespace["f"])


def test_names_the_api_would_reject_are_refused() -> None:
    def f() -> None:
        """Doc."""

    with pytest.raises(ValueError, match="must match"):
        tool(name="has.dot")(f)


def test_registry_answers_unknown_tools_and_bad_arguments_as_results() -> None:
    registry = ToolRegistry([sum_tool])
    unknown = registry.execute(ToolCall(id="1", name="nope", arguments="{}"))
    assert (unknown.status, unknown.content) == (
        "error",
        "Error: Unknown tool 'nope'. Call only the tools you were given.",
    )
    bad = registry.execute(ToolCall(id="2", name="sum", arguments='{"a": "x", "b": 1}'))
    assert bad.status == "error" and "a: Input should be a valid number" in bad.content
    ok = registry.execute(ToolCall(id="3", name="sum", arguments='{"a": 1, "b": 1}'))
    assert (ok.status, ok.content) == ("ok", "2.0")
    with pytest.raises(UnknownToolError):
        registry.get("nope")


def test_registry_refuses_two_tools_with_one_name() -> None:
    with pytest.raises(ValueError, match="two tools are named 'sum'"):
        ToolRegistry([sum_tool, sum_tool])


def test_send_email_requires_approval_and_its_schema_is_pinned() -> None:
    from assistant.agents import send_email

    assert send_email.requires_approval is True
    assert send_email.context_param == "ctx"
    assert send_email.spec() == {
        "type": "function",
        "function": {
            "name": "send_email",
            "description": "Send an email. A person approves each email before it is sent.",
            "parameters": {
                "additionalProperties": False,
                "properties": {
                    "to": {"description": "The recipient's email address.", "type": "string"},
                    "subject": {"description": "The subject line.", "type": "string"},
                    "body": {"description": "The text of the email.", "type": "string"},
                },
                "required": ["to", "subject", "body"],
                "type": "object",
            },
        },
    }


def test_a_before_tool_hooks_answer_of_any_tool_value_is_read_as_the_tools_would_be() -> None:
    # A hook answering with a dict or a number (as a tool may return) once failed the model step
    # on a deferred call and left a worker's run hanging: the model reads it as JSON text.
    from toolpipe.shared.agents import Agent, BeforeTool, Hooks
    from toolpipe.shared.messages import ToolCall
    from toolpipe.shared.runs.tool_hooks import before_hooks
    from toolpipe.shared.tools import ToolContext

    class Answers(Hooks):
        def before_tool(self, event: BeforeTool) -> None:
            event.result = {"cached": True, "n": 3}  # type: ignore[assignment]

    agent = Agent(name="answering", instructions="", tools=[], hooks=[Answers()])
    context = ToolContext(run_id="r", agent="answering", call_id="c", idempotency_key="k")
    _, answered = before_hooks(agent, ToolCall(id="c", name="t", arguments="{}"), context)
    assert answered is not None and answered.content == '{"cached": true, "n": 3}'
