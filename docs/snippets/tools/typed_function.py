import math
from datetime import date
from enum import Enum
from typing import Annotated, Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # on Python < 3.12 pydantic needs this TypedDict

from toolpipe import Param, tool


@tool
def square_root(x: float) -> float:
    """Compute the square root of a number.

    Args:
        x: The number; must be zero or positive.
    """
    if x < 0:
        raise ValueError("cannot take the square root of a negative number")  # the model reads this
    return math.sqrt(x)


assert square_root.invoke('{"x": "16"}') == "4.0"  # coerced from the string the model sent


class Priority(Enum):
    LOW = "low"
    HIGH = "high"


class Address(BaseModel):
    street: str
    city: str


class Window(TypedDict):
    start: date
    end: date


@tool(name="create_ticket", description="Open a support ticket.")
def open_ticket(
    title: Annotated[str, Field(description="One line", max_length=80)],
    priority: Priority,
    channel: Literal["email", "phone"],
    tags: list[str],
    ship_to: Address,
    window: Window,
    assignee: str | None,  # optional without a default: the model may leave it out
    team: Annotated[str, Param("Owning team", required=False)],  # explicitly optional
    notify: bool = True,
) -> dict[str, object]:
    return {"title": title, "priority": priority.value, "team": team, "assignee": assignee}


schema = open_ticket.spec()["function"]["parameters"]
assert schema["required"] == ["title", "priority", "channel", "tags", "ship_to", "window"]
assert schema["properties"]["priority"] == {"enum": ["low", "high"], "type": "string"}
assert schema["properties"]["window"]["properties"]["start"] == {"format": "date", "type": "string"}
