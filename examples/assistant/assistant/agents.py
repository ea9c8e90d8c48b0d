"""The example app: an assistant with four tools. Every `Agent` at this module's top level is
registered under its name (`[tool.toolpipe] app = "assistant.agents"` in pyproject.toml)."""

import math
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from toolpipe import Agent, tool


@tool
def sum(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool
def square_root(x: float) -> float:
    """Compute the square root of a number.

    Args:
        x: The number; must be zero or positive.
    """
    if x < 0:
        raise ValueError("cannot take the square root of a negative number")
    return math.sqrt(x)


@tool
def get_current_date_time(timezone: str = "UTC") -> str:
    """Get the current date and time in the user's time zone, as ISO-8601.

    Args:
        timezone: The user's IANA time zone, for example Europe/Paris.
    """
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(f"unknown time zone '{timezone}'") from e
    return datetime.now(zone).isoformat(timespec="seconds")


@tool
def set_alarm(time: datetime) -> str:
    """Set an alarm at the given time.

    Args:
        time: When the alarm rings, as ISO-8601 with a UTC offset, for example 2026-11-23T07:30:00+01:00.
    """
    if time.tzinfo is None:
        raise ValueError("the time needs a UTC offset, for example 2026-11-23T07:30:00+01:00")
    if time <= datetime.now(time.tzinfo):
        raise ValueError(f"{time.isoformat()} is in the past")
    return f"Alarm set for {time.isoformat()}."


assistant = Agent(
    name="assistant",
    instructions=(
        "You are a helpful assistant. Use the tools for arithmetic, dates and alarms; "
        "never guess a number a tool can compute. Answer briefly."
    ),
    tools=[sum, square_root, get_current_date_time, set_alarm],
)
