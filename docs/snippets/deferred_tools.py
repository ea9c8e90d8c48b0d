from pydantic import BaseModel

from toolpipe import Agent, schema_tool, tool


@tool(deferred="human")  # a person's answer is the result; the body never runs
def ask_user(question: str) -> str:
    """Ask the user a question and wait for their answer.

    Args:
        question: The question, whole: the user sees only this.
    """
    raise NotImplementedError("answered by a person")


class Seats(BaseModel):
    seats: int
    window: bool = False


@tool(deferred="human", result_schema=Seats, wait_seconds=3 * 24 * 3600)  # a form, 3 days
def choose_seats(question: str) -> str:
    """Ask the user how many seats to book.

    Args:
        question: What to ask.
    """
    raise NotImplementedError("answered by a person")


# Return of control: no handler; the caller's program runs it where it can (its own machine).
read_clipboard = schema_tool(
    {
        "name": "read_clipboard",
        "description": "Read the text on the user's clipboard.",
        "parameters": {
            "type": "object",
            "properties": {"format": {"type": "string"}},
            "required": ["format"],
        },
    },
    deferred="client",
    result_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)

travel = Agent(name="travel", instructions="Book trips.", tools=[ask_user, choose_seats, read_clipboard])
assert (ask_user.deferred, read_clipboard.deferred) == ("human", "client")
assert choose_seats.result_schema == Seats.model_json_schema()
