"""An agent: a name, a system prompt, a model, tools and the limits of its loop."""

from dataclasses import dataclass, field

from shared.tools import Tool, ToolRegistry

# Step Functions caps an execution at 25,000 history events. One turn with one tool call
# costs 19 events in the state machine as built (measured in tests/e2e), plus 7 per extra
# parallel call; 200 turns of 5 calls stay near 11,000.
MAX_ITERATIONS_CEILING = 200


@dataclass(frozen=True)
class Agent:
    name: str
    instructions: str
    tools: list[Tool] = field(default_factory=list)
    model: str | None = None  # None: the deployment's default (TOOLPIPE_MODEL)
    max_iterations: int = 10

    def __post_init__(self) -> None:
        if not 1 <= self.max_iterations <= MAX_ITERATIONS_CEILING:
            raise ValueError(f"agent '{self.name}': max_iterations must be 1..{MAX_ITERATIONS_CEILING}")
        # Fails at import, not mid-run, when two tools share a name.
        object.__setattr__(self, "registry", ToolRegistry(self.tools))

    registry: ToolRegistry = field(init=False, repr=False, compare=False)

    def system_prompt(self, timezone: str) -> str:
        return f"{self.instructions}\n\nThe user's time zone is {timezone}."
