"""An agent: a name, a system prompt, a model, tools and the limits of its loop."""

from dataclasses import dataclass, field

from shared.tools import Tool, ToolRegistry

# Step Functions caps an execution at 25,000 history events. Measured on the state machine
# as built (tests/e2e/test_limits.py measures them again): a run costs 13 events, each turn
# with tool calls 11 more, and each call 8 more.
HISTORY_EVENT_LIMIT = 25_000
EVENTS_PER_RUN = 13
EVENTS_PER_TURN = 11
EVENTS_PER_CALL = 8


def history_events(iterations: int, calls_per_turn: int) -> int:
    """The most events a run of this agent can write to its execution history."""
    return EVENTS_PER_RUN + iterations * (EVENTS_PER_TURN + EVENTS_PER_CALL * calls_per_turn)


@dataclass(frozen=True)
class Agent:
    name: str
    instructions: str
    tools: list[Tool] = field(default_factory=list)
    model: str | None = None  # None: the deployment's default (TOOLPIPE_MODEL)
    max_iterations: int = 10
    # Calls past this in one model reply get an error result instead of a dispatch.
    max_calls_per_turn: int = 10
    # For tools that set none; None: only the state machine's per-call timeout applies.
    tool_timeout_seconds: float | None = 60.0

    def __post_init__(self) -> None:
        if self.max_iterations < 1 or self.max_calls_per_turn < 1:
            raise ValueError(f"agent '{self.name}': max_iterations and max_calls_per_turn must be at least 1")
        worst = history_events(self.max_iterations, self.max_calls_per_turn)
        if worst > HISTORY_EVENT_LIMIT:
            raise ValueError(
                f"agent '{self.name}': {self.max_iterations} turns of {self.max_calls_per_turn} calls could write "
                f"{worst} Step Functions history events; the limit is {HISTORY_EVENT_LIMIT}"
            )
        # Fails at import, not mid-run, when two tools share a name.
        object.__setattr__(self, "registry", ToolRegistry(self.tools, self.tool_timeout_seconds))

    registry: ToolRegistry = field(init=False, repr=False, compare=False)

    def system_prompt(self, timezone: str) -> str:
        return f"{self.instructions}\n\nThe user's time zone is {timezone}."
