"""The example app: an assistant with six tools, and a front desk that hands requests to it. Every `Agent` at this module's top level is
registered under its name (`[tool.toolpipe] app = "assistant.agents"` in pyproject.toml)."""

import math
import os
from datetime import datetime
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import boto3

from toolpipe import Agent, ToolContext, tool

# The address mail is sent from: an SES identity verified in the account (the local runtime
# verifies the one it names in TOOLPIPE_EMAIL_SENDER in its emulated SES).
DEFAULT_SENDER = "assistant@example.com"


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


@cache
def _ses() -> Any:  # no SES stubs among the dev dependencies
    # Once per cold start, not per call.
    return boto3.client("ses")


# In the "mail" runner: its own Lambda function and role, the only one granted SES (cdk_app.py).
@tool(requires_approval=True, runner="mail")
def send_email(to: str, subject: str, body: str, ctx: ToolContext) -> str:
    """Send an email. A person approves each email before it is sent.

    Args:
        to: The recipient's email address.
        subject: The subject line.
        body: The text of the email.
    """
    sent = _ses().send_email(
        Source=os.environ.get("TOOLPIPE_EMAIL_SENDER", DEFAULT_SENDER),
        Destination={"ToAddresses": [to]},
        Message={"Subject": {"Data": subject}, "Body": {"Text": {"Data": body}}},
        # Tags, not a header: SES keys nothing on them, but the call's key shows in its events.
        Tags=[{"Name": "toolpipe-call", "Value": ctx.idempotency_key.replace(":", "-")[:256]}],
    )
    return f"Email sent to {to} (message id {sent['MessageId']})."


@tool(deferred="human", wait_seconds=3 * 24 * 3600)
def ask_user(question: str) -> str:
    """Ask the user a question and wait for their answer (it may take hours).

    Args:
        question: The question, whole: the user sees only this.
    """
    # A human-input tool: the person's answer is the call's result; no worker runs this body.
    raise NotImplementedError("answered by a person")


assistant = Agent(
    name="assistant",
    instructions=(
        "You are a helpful assistant. Use the tools for arithmetic, dates, alarms and emails; "
        "never guess a number a tool can compute. When you need something only the user knows, "
        "ask them with ask_user. Answer briefly."
    ),
    tools=[sum, square_root, get_current_date_time, set_alarm, send_email, ask_user],
    description="Arithmetic, dates and times, alarms, emails, and questions for the user.",
)

# A front desk: it has no tools of its own and hands each request to the agent that can do it
# (the model sees a `transfer_to_assistant` tool). `toolpipe run --agent triage "..."`.
triage = Agent(
    name="triage",
    instructions=(
        "You are the front desk. Hand every request to the agent that can do it; answer only "
        "greetings yourself."
    ),
    handoffs=[assistant],
    description="Routes each request to the agent that can do it.",
)
