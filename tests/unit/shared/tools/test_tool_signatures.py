"""Schemas pinned for a representative set of signatures (issue #3, item 1)."""

import enum
import threading
import time
from dataclasses import dataclass
from datetime import date, datetime
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from toolpipe.shared.tools import Param, ToolContext, tool
from toolpipe.shared.tools.errors import ToolExecutionError, ToolTimeoutError


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str
    zip_code: str = Field(description="Postal code")


@dataclass
class Item:
    name: str
    quantity: int = 1


class Options(TypedDict):
    express: bool


class Tree(BaseModel):
    label: str
    children: list["Tree"] = []


def _params(fn: Any) -> dict[str, Any]:
    return dict(tool(fn).parameters)


def test_scalars_collections_and_defaults() -> None:
    def f(
        name: str,
        count: int,
        ratio: float,
        flag: bool,
        tags: list[str],
        unique: set[int],
        pair: tuple[int, str],
        scores: dict[str, float],
        note: Optional[str],  # noqa: UP045 - users write Optional[T]; it must mean "may be left out"
        limit: int = 10,
    ) -> None:
        """Scalars.

        Args:
            name: A name.
        """

    assert _params(f) == {
        "additionalProperties": False,
        "properties": {
            "name": {"description": "A name.", "type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "tags": {"items": {"type": "string"}, "type": "array"},
            "unique": {"items": {"type": "integer"}, "type": "array", "uniqueItems": True},
            "pair": {
                "maxItems": 2,
                "minItems": 2,
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "type": "array",
            },
            "scores": {"additionalProperties": {"type": "number"}, "type": "object"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "limit": {"default": 10, "type": "integer"},
        },
        "required": ["name", "count", "ratio", "flag", "tags", "unique", "pair", "scores"],
        "type": "object",
    }


def test_literals_enums_dates_and_nested_types_are_inlined() -> None:
    def f(
        mode: Literal["fast", "safe"],
        color: Color,
        at: datetime,
        day: date,
        to: Address,
        items: list[Item],
        options: Options,
    ) -> None:
        """Nested."""

    assert _params(f) == {
        "additionalProperties": False,
        "properties": {
            "mode": {"enum": ["fast", "safe"], "type": "string"},
            "color": {"enum": ["red", "blue"], "type": "string"},
            "at": {"format": "date-time", "type": "string"},
            "day": {"format": "date", "type": "string"},
            "to": {
                "properties": {
                    "street": {"type": "string"},
                    "zip_code": {"description": "Postal code", "type": "string"},
                },
                "required": ["street", "zip_code"],
                "type": "object",
            },
            "items": {
                "items": {
                    "additionalProperties": False,
                    "properties": {"name": {"type": "string"}, "quantity": {"default": 1, "type": "integer"}},
                    "required": ["name"],
                    "type": "object",
                },
                "type": "array",
            },
            "options": {
                "additionalProperties": False,
                "properties": {"express": {"type": "boolean"}},
                "required": ["express"],
                "type": "object",
            },
        },
        "required": ["mode", "color", "at", "day", "to", "items", "options"],
        "type": "object",
    }


def test_a_recursive_type_keeps_its_definitions() -> None:
    def f(tree: Tree) -> None:
        """Recursive."""

    params = _params(f)
    assert params["properties"]["tree"]["properties"]["children"] == {
        "default": [],
        "items": {"$ref": "#/$defs/Tree"},
        "type": "array",
    }
    assert set(params["$defs"]) == {"Tree"}


def test_no_parameters() -> None:
    def ping() -> str:
        """Answer pong."""
        return "pong"

    assert _params(ping) == {"additionalProperties": False, "properties": {}, "type": "object"}


def test_annotated_descriptions_win_and_params_can_be_made_optional() -> None:
    def f(
        city: Annotated[str, Field(description="City from Annotated")],
        country: Annotated[str, Param("ISO country code", required=False)],
        days: Annotated[int, Field(ge=1, le=14)] = 3,
    ) -> str:
        """Weather.

        Args:
            city: City from the docstring.
            days: How many days.
        """
        return f"{city}/{country}/{days}"

    weather = tool(f)
    assert weather.parameters == {
        "additionalProperties": False,
        "properties": {
            "city": {"description": "City from Annotated", "type": "string"},
            "country": {"default": None, "description": "ISO country code", "type": "string"},
            "days": {
                "default": 3,
                "description": "How many days.",
                "maximum": 14,
                "minimum": 1,
                "type": "integer",
            },
        },
        "required": ["city"],
        "type": "object",
    }
    assert weather.invoke('{"city": "Oslo"}') == "Oslo/None/3"
    with pytest.raises(Exception, match="days: Input should be less than or equal to 14"):
        weather.invoke('{"city": "Oslo", "days": 30}')


@pytest.mark.parametrize(
    "doc",
    [
        """Convert money.

        Args:
            amount: How much.
            currency: Target currency,
                three letters.
        """,
        """Convert money.

        :param amount: How much.
        :param str currency: Target currency,
            three letters.
        :returns: the converted amount
        """,
        """Convert money.

        Parameters
        ----------
        amount : float
            How much.
        currency : str
            Target currency,
            three letters.

        Returns
        -------
        float
        """,
    ],
    ids=["google", "sphinx", "numpy"],
)
def test_docstring_styles(doc: str) -> None:
    def convert(amount: float, currency: str) -> float:
        return amount

    convert.__doc__ = doc
    spec = tool(convert).spec()["function"]
    assert spec["description"] == "Convert money."
    assert spec["parameters"]["properties"] == {
        "amount": {"description": "How much.", "type": "number"},
        "currency": {"description": "Target currency, three letters.", "type": "string"},
    }


def test_context_is_injected_and_hidden_from_the_model() -> None:
    @tool
    def whoami(greeting: str, ctx: ToolContext) -> str:
        """Greet the caller.

        Args:
            greeting: How to greet.
        """
        ctx.state["greeted"] = True
        return f"{greeting} {ctx.caller} ({ctx.run_id}/{ctx.call_id})"

    assert list(whoami.parameters["properties"]) == ["greeting"]
    context = ToolContext(run_id="r1", agent="a", call_id="c1", caller="ana")
    assert whoami.invoke('{"greeting": "hi"}', context) == "hi ana (r1/c1)"
    assert context.state == {"greeted": True} and context.state.changes() == ({"greeted": True}, [])
    with pytest.raises(ToolExecutionError, match="needs a ToolContext"):
        whoami.invoke('{"greeting": "hi"}')


def test_result_converter() -> None:
    @tool(result_converter=lambda rows: "\n".join(f"- {r}" for r in rows))
    def names() -> list[str]:
        """List names."""
        return ["ana", "bo"]

    assert names.invoke("{}") == "- ana\n- bo"


def test_timeout_answers_at_once() -> None:
    release = threading.Event()

    @tool(timeout_seconds=0.2)
    def stuck() -> str:
        """Never answers in time."""
        release.wait(30)
        return "late"

    started = time.monotonic()
    try:
        with pytest.raises(ToolTimeoutError, match=r"Tool 'stuck' timed out after 0\.2 s\."):
            stuck.invoke("{}")
        assert time.monotonic() - started < 10  # not the 30 s the tool would take
    finally:
        release.set()


def test_opt_in_retries_with_backoff() -> None:
    attempts: list[int] = []
    sleeps: list[float] = []

    def flaky() -> str:
        """Fails twice."""
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("reset by peer")
        return "ok"

    retried = tool(retry_on=(ConnectionError,), max_retries=2, retry_backoff_seconds=0.1)(flaky)
    object.__setattr__(retried, "sleep", sleeps.append)
    assert retried.invoke("{}") == "ok"
    assert sleeps == [0.1, 0.2]

    attempts.clear()
    once = tool(retry_on=(ConnectionError,), max_retries=1)(flaky)
    object.__setattr__(once, "sleep", sleeps.append)
    with pytest.raises(ToolExecutionError, match="failed after 2 attempts: ConnectionError: reset by peer"):
        once.invoke("{}")

    with pytest.raises(ValueError, match="max_retries needs retry_on"):
        tool(max_retries=2)(flaky)


def test_every_way_of_changing_the_state_is_saved() -> None:
    from toolpipe.shared.tools import RunState

    state = RunState({"cart": ["a"], "gone": 1, "same": {"x": 1}, "also_gone": 2})
    state["cart"].append("b")  # in place
    state.update(new=1)
    state.setdefault("other", [])
    del state["gone"]
    state.pop("also_gone")
    state["same"] = {"x": 1}  # assigned, but equal: not a change
    assert state.changes() == ({"cart": ["a", "b"], "new": 1, "other": []}, ["gone", "also_gone"])
