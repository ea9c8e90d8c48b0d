"""Handoff: the model passes the run to another agent through a tool named `transfer_to_<agent>`.

The run goes on under the target from the next turn: its instructions, tools, model, limits and
hooks; the history carries over (all of it, unless the handoff filters what the target reads).
As the OpenAI Agents SDK's handoffs, a transfer is a tool the model sees; unlike a tool, it is
never dispatched: the orchestrator makes the switch and writes its result.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from toolpipe.shared.errors import DefinitionError
from toolpipe.shared.messages import AssistantMessage, HistoryItem, ToolResult
from toolpipe.shared.tools.names import wire_name

# Given the history before the transfer, what the target reads of it (pure: it runs again
# on every turn of the target, so it must give the same answer each time).
InputFilter = Callable[[list[HistoryItem]], list[HistoryItem]]


class _Named(Protocol):
    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class HandoffContext:
    """What `on_handoff` is told of the transfer."""

    run_id: str
    from_agent: str
    to_agent: str
    call_id: str
    caller: str | None = None


@dataclass(frozen=True)
class Handoff:
    """A transfer an agent may make: `Agent(..., handoffs=[billing, Handoff("refunds", ...)])`.

    - `agent`: the target's name (or the Agent); resolved when the model calls the transfer, so
      two agents may hand off to each other and a target removed by a redeploy is an error the
      model reads, not a failed import.
    - `tool_name`: default `transfer_to_<agent>` (made to fit the API's name rules).
    - `description`: default the target's `description` (or the first line of its instructions).
    - `input_type`: a pydantic model the model fills in (a reason, a summary); validated as a
      tool's arguments are, and given to `on_handoff`.
    - `on_handoff(context, input)`: called once the transfer is valid, before it is recorded; if
      it raises, the transfer is not made and the model reads why. A crash just after it may
      call it again: make it idempotent.
    - `input_filter`: what the target reads of the history before the transfer (see
      `remove_tool_calls`); everything after it, the target reads whole.
    """

    agent: str | _Named
    tool_name: str | None = None
    description: str | None = None
    input_type: type[BaseModel] | None = None
    on_handoff: Callable[[HandoffContext, BaseModel | None], None] | None = None
    input_filter: InputFilter | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.agent, str):
            object.__setattr__(self, "agent", self.agent.name)

    @property
    def target(self) -> str:
        """The target agent's name."""
        return self.agent if isinstance(self.agent, str) else self.agent.name

    @property
    def name(self) -> str:
        """The wire name the model calls."""
        return wire_name(self.tool_name or f"transfer_to_{self.target}")

    def parameters(self) -> dict[str, Any]:
        if self.input_type is None:
            return {"type": "object", "properties": {}, "additionalProperties": False}
        return self.input_type.model_json_schema()

    def spec(self, target_description: str | None) -> dict[str, Any]:
        description = self.description or target_description or f"the {self.target} agent"
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": f"Hand the conversation to the {self.target} agent, which answers from "
                f"then on: {description}",
                "parameters": self.parameters(),
            },
        }


def handoffs_of(owner: str, given: Sequence[Any], tool_names: Sequence[str]) -> tuple[Handoff, ...]:
    """An agent's `handoffs` as `Handoff`s: each an Agent, a name or a Handoff; their tool
    names unique and apart from the agent's own tools."""
    found: list[Handoff] = []
    for item in given:
        if isinstance(item, Handoff):
            found.append(item)
        elif isinstance(item, str) or isinstance(getattr(item, "name", None), str):
            found.append(Handoff(item))
        else:
            raise DefinitionError(
                f"agent '{owner}': handoffs are Agents, agent names or Handoff(...), not {type(item).__name__}"
            )
    seen = set(tool_names)
    for handoff in found:
        if handoff.name in seen:
            raise DefinitionError(
                f"agent '{owner}': the handoff tool '{handoff.name}' has the name of another tool or "
                "handoff: give it tool_name=..."
            )
        seen.add(handoff.name)
    return tuple(found)


def remove_tool_calls(items: list[HistoryItem]) -> list[HistoryItem]:
    """An `input_filter`: the target reads the conversation's text only, without the earlier
    agent's tool calls and results (the Agents SDK's `remove_all_tools`)."""
    kept: list[HistoryItem] = []
    for item in items:
        if isinstance(item, ToolResult):
            continue
        if isinstance(item, AssistantMessage):
            if not item.content:
                continue
            item = item.model_copy(update={"tool_calls": []})
        kept.append(item)
    return kept
