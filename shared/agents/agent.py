"""An agent: a name, a system prompt, a model, tools and the limits of its loop."""

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from toolpipe.shared.agents.handoff import Handoff, handoffs_of
from toolpipe.shared.agents.hooks import Hooks
from toolpipe.shared.errors import DefinitionError
from toolpipe.shared.messages import NAME_PATTERN, MaxDurationWaits
from toolpipe.shared.settings import EXECUTION_EVENT_BUDGET, WAITING_CALLS_PER_TURN
from toolpipe.shared.tools import Tool, ToolRegistry, ToolSource
from toolpipe.shared.tools.tool import positive_seconds

# Step Functions caps an execution at 25,000 history events; a run whose execution nears its
# budget continues in a fresh execution. Measured on the state machine as built (moto's
# interpreter; tests/e2e/test_limits.py measures each again):
HISTORY_EVENT_LIMIT = 25_000
EVENTS_PER_RUN = (
    22  # start, the race of the loop and the deadline's timer (RunWithin), the last model step, Done
)
EVENTS_PER_TURN = 11  # a model step that dispatched calls, and its Map
EVENTS_PER_CALL = 8  # one call its worker answered
EVENTS_PER_STEP_RETRY = 3  # a failed Lambda attempt: TaskFailed, TaskScheduled, TaskStarted
EVENTS_PER_FAILED_CALL = 2  # more, when the task times out or misses a heartbeat: the Catch's CallFailed
EVENTS_PER_FAILED_ENDING = (
    0  # more, when the run ends through MarkFailed: as many as the RunEnded way out (both leave RunWithin)
)
# A call in a turn with a call that waits for approval: its branch's NeedsApproval Choice, and
# for a gated call the WaitForApproval task (measured 8 with the Choice; a denial writes fewer
# than a dispatch; a deferred call's WaitForResult as many). Counted for every call of an agent
# that has a gated or a deferred tool.
EVENTS_PER_APPROVAL = 8
# WaitForApproval's retrier (transient Lambda errors), at most.
APPROVAL_TASK_RETRIES = 6
# Heartbeats write no history events. The definition's retriers, at most (a test holds these
# to infra/cdk/definition.py): CallModel 6 transient Lambda errors + 2 ModelCallError; MarkFailed 6.
MODEL_STEP_RETRIES = 8
# A wait for the model's rate limit (shared/runs/rate_governor.py): the model step that decided
# it, the Route Choice and the Wait state.
EVENTS_PER_RATE_WAIT = 9
MARK_FAILED_RETRIES = 6


def worst_turn_events(calls: int, gated: bool = False) -> int:
    """The most events one turn with `calls` dispatched calls can write: its model step retried
    as often as the definition allows, and every call ended by its timeout's Catch. `gated`: the
    agent has tools that require approval, so every call may also wait for one, its task retried."""
    per_call = EVENTS_PER_CALL + EVENTS_PER_FAILED_CALL
    if gated:
        per_call += EVENTS_PER_APPROVAL + APPROVAL_TASK_RETRIES * EVENTS_PER_STEP_RETRY
    return EVENTS_PER_TURN + MODEL_STEP_RETRIES * EVENTS_PER_STEP_RETRY + calls * per_call


def execution_events_bound(turn_calls: list[int], gated: bool = False) -> int:
    """An upper bound of the events an execution will have written once it ends, given the
    number of dispatched calls in each turn it ran: those turns at their worst (see
    `worst_turn_events`), plus the worst way to end from here (one more model step retried to
    the limit, then MarkFailed retried to the limit).

    Before each model step, a run whose `execution_events_bound(turns) +
    worst_turn_events(agent.max_calls_per_turn)` passes the budget continues in a fresh execution.
    """
    ending = (
        EVENTS_PER_RUN
        + MODEL_STEP_RETRIES * EVENTS_PER_STEP_RETRY
        + EVENTS_PER_FAILED_ENDING
        + MARK_FAILED_RETRIES * EVENTS_PER_STEP_RETRY
    )
    return ending + sum(worst_turn_events(calls, gated) for calls in turn_calls)


@dataclass(frozen=True)
class ModelPrice:
    """USD per million tokens: what a run's cost total and cost budget are computed with."""

    input_per_million: float
    output_per_million: float

    def micro_usd(self, prompt_tokens: int, completion_tokens: int) -> int:
        return round(prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million)


# Picks the tools a run may use from its input: (prompt, caller) -> tool names.
ToolProvider = Callable[[str, str | None], Iterable[str]]


@dataclass(frozen=True)
class Agent:
    name: str
    instructions: str
    tools: list[Tool] = field(default_factory=list)
    # Tools listed at run time, e.g. `McpServer("docs", url=...)` (shared/mcp): each of their
    # calls is an ordinary call (own invocation, timeout, heartbeat, ledger).
    tool_sources: list[ToolSource] = field(default_factory=list)
    model: str | None = None  # None: the deployment's default (TOOLPIPE_MODEL)
    max_iterations: int = 10
    # Calls past this in one model reply get an error result instead of a dispatch.
    max_calls_per_turn: int = 10
    # For tools that set none; None: only the state machine's per-call timeout applies.
    tool_timeout_seconds: float | None = 60.0
    # When a tool raises: "message" shows the model the exception's message, "generic" a plain
    # "the tool failed" (the message stays in the history for operators), "fail" ends the run.
    on_tool_error: Literal["message", "generic", "fail"] = "message"
    # Turns in which the model sent invalid calls (unknown tool, bad JSON, bad arguments).
    max_repair_turns: int = 3
    # Run-wide budgets; reaching one ends the run with status "limit".
    max_tool_calls: int = 50
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    price: ModelPrice | None = None
    # How deep agents used as tools may nest below a run of this agent (its children, their
    # children...). The budgets above (calls, tokens, cost) count the whole tree of runs.
    max_agent_depth: int = 3
    # The same tool with the same arguments this many times ends the run: the model is looping.
    max_identical_calls: int = 3
    # Wall-clock seconds a run may take from its start (or its resume); past it the state
    # machine ends the run `limit` (shared/runs/time_limit.py). None: no limit but the state
    # machine's own. A start request may ask for less. Whole seconds: Step Functions waits to
    # the second.
    max_duration: int | None = None
    # Whether time waiting for a person or a program counts toward `max_duration`: "count",
    # "exclude", or None to let the start request say (counting unless it asks "exclude").
    # "count" wins when the agent or the start request asks for it.
    max_duration_waits: MaxDurationWaits | None = None
    tool_provider: ToolProvider | None = None
    # Longer results are stored whole in S3; the model reads this many characters and a reference.
    max_result_chars: int | None = 20_000
    # The final answer must be JSON that validates against this model; it is stored as JSON.
    output_type: type[BaseModel] | None = None
    hooks: list[Hooks] = field(default_factory=list)
    # Agents the model may hand the run to (`transfer_to_<name>` tools): Agents, their names,
    # or `Handoff(...)` for a tool name, description, input, hook or history filter of its own.
    handoffs: "list[Agent | str | Handoff]" = field(default_factory=list)
    # What the agent is for, in a line: the description of the transfer tools that lead to it.
    description: str | None = None

    @property
    def waits(self) -> bool:
        """Whether some of its calls may wait for a person or a program (approval, deferred)."""
        return any(t.requires_approval is not False or t.deferred is not None for t in self.tools)

    def __post_init__(self) -> None:
        # The name is how runs, the API and `--agent` reach it: what they accept, from the start.
        if not re.fullmatch(NAME_PATTERN, self.name):
            raise DefinitionError(
                f"agent name {self.name!r}: use 1-64 letters, digits, '_' or '-' (it names the agent in runs)"
            )
        if self.max_iterations < 1 or self.max_calls_per_turn < 1:
            raise DefinitionError(
                f"agent '{self.name}': max_iterations and max_calls_per_turn must be at least 1"
            )
        if self.tool_timeout_seconds is not None and not positive_seconds(self.tool_timeout_seconds):
            raise DefinitionError(
                f"agent '{self.name}': tool_timeout_seconds is a number of seconds above 0, or None"
            )
        # Whole seconds: Step Functions waits to the second, and DynamoDB stores no float.
        if self.max_duration is not None and (type(self.max_duration) is not int or self.max_duration < 1):
            raise DefinitionError(
                f"agent '{self.name}': max_duration is a whole number of seconds, 1 or more, or None"
            )
        if self.max_duration_waits not in (None, "count", "exclude"):
            raise DefinitionError(f'agent \'{self.name}\': max_duration_waits is "count", "exclude" or None')
        if self.max_cost_usd is not None and self.price is None:
            raise DefinitionError(f"agent '{self.name}': max_cost_usd needs a price to count cost with")
        # Long runs continue in fresh executions, but one turn cannot be split across two.
        worst = execution_events_bound([self.max_calls_per_turn])
        if worst > EXECUTION_EVENT_BUDGET:
            raise DefinitionError(
                f"agent '{self.name}': one turn of {self.max_calls_per_turn} calls could write {worst} Step "
                f"Functions history events; one execution's budget is {EXECUTION_EVENT_BUDGET}"
            )
        if self.waits and self.max_calls_per_turn > WAITING_CALLS_PER_TURN:
            raise DefinitionError(
                f"agent '{self.name}': max_calls_per_turn is at most {WAITING_CALLS_PER_TURN} for an agent "
                "whose calls may wait for a person or a program (Step Functions runs 40 branches at once)"
            )
        if self.output_type is not None and any(t.return_direct for t in self.tools):
            raise DefinitionError(
                f"agent '{self.name}': a return_direct tool's text would be the answer, which must be "
                f"{self.output_type.__name__} JSON: give the agent either, not both"
            )
        names = [source.name for source in self.tool_sources]
        if len(set(names)) != len(names):
            raise DefinitionError(f"agent '{self.name}': two tool sources share a name")
        # Fails at import, not mid-run, when two tools share a name.
        object.__setattr__(
            self, "registry", ToolRegistry(self.tools, self.tool_timeout_seconds, self.tool_sources)
        )
        object.__setattr__(
            self, "transfers", handoffs_of(self.name, self.handoffs, self.registry.static_names)
        )

    registry: ToolRegistry = field(init=False, repr=False, compare=False)
    transfers: tuple[Handoff, ...] = field(init=False, repr=False, compare=False)

    def transfer_named(self, name: str) -> Handoff | None:
        """The handoff whose tool the model called `name`, or None (an ordinary tool)."""
        return next((h for h in self.transfers if h.name == name), None)

    def transfer_to(self, agent: str) -> Handoff | None:
        """This agent's handoff to `agent`, if it declares one (its history filter applies)."""
        return next((h for h in self.transfers if h.target == agent), None)

    @property
    def summary(self) -> str:
        """What a transfer tool says of this agent: its description, else its instructions' first line."""
        return self.description or self.instructions.strip().split("\n", 1)[0][:200]

    def system_prompt(self, timezone: str) -> str:
        prompt = f"{self.instructions}\n\nThe user's time zone is {timezone}."
        if self.output_type is not None:
            schema = json.dumps(self.output_type.model_json_schema())
            prompt += (
                "\n\nWhen you give your final answer, reply with only a JSON object that matches this "
                f"JSON Schema, with no other text:\n{schema}"
            )
        return prompt
